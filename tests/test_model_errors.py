"""Bad input to the model gets a clear error that names the key or value and says how to fix it."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.framework.share_tools import RunFileMissing, get_action_stats, read_mode_config
from DiT4DiT.model.modules.cosmos_backbone import FrameCountWarning
from DiT4DiT.tools import tiny_cosmos


def test_vl_hidden_dim_must_match_the_action_head(tiny_model_cfg):
    # The transformer's own width is checked with the base model folder (tests/test_bad_inputs.py).
    with pytest.raises(ConfigError, match="cross_attention_dim=32 must equal framework.cosmos25.vl_hidden_dim=2048"):
        build_framework(tiny_model_cfg("framework.cosmos25.vl_hidden_dim=2048"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("framework.cosmos25.torch_dtype=float64", "torch_dtype: 'float64' is not one of bfloat16, float16, float32"),
        ("framework.cosmos25.training=both", "training: 'both' is not one of joint, action, video"),
        ("framework.cosmos25.future_loss_type=pixel_l2", "future_loss_type: 'pixel_l2' is not one of flow_matching"),
        ("framework.action_model.action_horizon=16", "action_horizon (16) must equal future_action_window_size + 1 (8)"),
        ("framework.action_model.diffusion_model_cfg.cross_attention_dim=64", "cross_attention_dim=64 must equal"),
        ("framework.action_model.action_dim=7", "action_dim=7 must equal datasets.vla_data.max_action_dim=14"),
        ("framework.action_model.diffusion_model_cfg.attention_head_dim=null", "set both or neither"),
        ("framework.name=DiT5DiT", "framework.name='DiT5DiT' is not a registered framework; registered: DiT4DiT"),
    ],
)
def test_bad_config_values(tiny_model_cfg, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_framework(tiny_model_cfg(override))


def test_frame_size_must_be_a_multiple_of_16(tiny_model_cfg, tiny_examples):
    with pytest.raises(ConfigError, match=r"image_size=40: Cosmos needs frame sides that are multiples of 16; use e\.g\. 32"):
        tiny_model_cfg("datasets.vla_data.image_size=40")
    cfg = tiny_model_cfg()
    examples = tiny_examples(cfg)
    for example in examples:  # frames from elsewhere (e.g. a policy client) are checked too
        example["image"] = [torch.rand(3, 40, 40) for _ in example["image"]]
    with pytest.raises(ConfigError, match=r"frame size 40x40 \(HxW\).*multiples of 16.*image_size"):
        build_framework(cfg)(examples)


def test_frame_count_disagreeing_with_config(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    with pytest.raises(ConfigError, match="samples carry 3 frames but the config gives 5.*video_delta_indices"):
        model(tiny_examples(cfg, frames=3))


def _drop_state(examples):
    for example in examples:
        del example["state"]


def _five_action_steps(examples):
    for example in examples:
        example["action"] = example["action"][:5]


# What a caller outside the trainer (the server, the original's API) can hand the model that contradicts its
# config; the trainer's config check refuses each of these before a model is built (tests/test_bad_inputs.py).
@pytest.mark.parametrize(
    "overrides, frames, edit, message",
    [
        pytest.param((), None, _drop_state, "state_dim > 0) but the examples carry no 'state'; set "
                     "framework.action_model.state_dim=0", id="state_dim_without_state"),
        pytest.param((), None, _five_action_steps, "5 action steps but the model expects framework.action_model."
                     "future_action_window_size + 1 = 8; make the data's action chunk", id="action_chunk"),
        pytest.param(("framework.cosmos25.training=video",), 1, None, "training=video needs future frames, but the "
                     "examples carry one frame each; give datasets.vla_data.video_delta_indices", id="video_one_frame"),
    ],
)
def test_examples_contradicting_the_config(tiny_model_cfg, tiny_examples, overrides, frames, edit, message):
    cfg = tiny_model_cfg(*overrides)
    examples = tiny_examples(cfg, frames=frames)
    if edit is not None:
        edit(examples)
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_framework(cfg)(examples)


def test_a_video_only_model_refuses_to_predict_actions(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("framework.cosmos25.training=video")
    with pytest.raises(ConfigError, match="training=video builds no action head.*serve a run trained with training="):
        build_framework(cfg).predict_action(tiny_examples(cfg))


def test_run_folder_mistakes_name_the_file_or_key(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(RunFileMissing, match="steps_1_pytorch_model.pt` does not exist; give an existing .pt file"):
        read_mode_config(run / "checkpoints" / "steps_1_pytorch_model.pt")
    (run / "checkpoints" / "model.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match="model.bin: a checkpoint is a .pt file two levels below its run folder"):
        read_mode_config(run / "checkpoints" / "model.bin")
    (run / "checkpoints" / "steps_1_pytorch_model.pt").write_bytes(b"")
    with pytest.raises(RunFileMissing, match="Missing `config.yaml` for run_dir"):
        read_mode_config(run / "checkpoints" / "steps_1_pytorch_model.pt")
    stats = {"libero": {"action": {}}, "robotwin": {"action": {}}}
    with pytest.raises(ConfigError, match=re.escape("more than one dataset tag; pass unnorm_key, one of ['libero', "
                                                    "'robotwin']")):
        get_action_stats(None, stats)
    with pytest.raises(ConfigError, match=re.escape("unnorm_key 'franka' is not in the dataset statistics; choose")):
        get_action_stats("franka", stats)


def test_wasted_frames_warn_once_with_the_fix(tiny_model_cfg):
    with pytest.warns(FrameCountWarning, match="8 frames: .*frames 6-8 are dropped; use 5 or 9") as record:
        build_framework(tiny_model_cfg("datasets.vla_data.video_delta_indices=[0,1,2,3,4,5,6,7]",
                                       "datasets.vla_data.action_video_freq_ratio=1"))
    assert len([w for w in record if issubclass(w.category, FrameCountWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrameCountWarning)
        build_framework(tiny_model_cfg())


def test_tiny_cosmos_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    assert tiny_cosmos.main(["--out", str(out)]) == 2
    assert "exists and is not empty; pass --overwrite" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["existing"]  # no staging folder left behind
