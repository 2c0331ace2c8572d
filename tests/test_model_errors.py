"""Bad input to the model gets a clear error that names the key or value and says how to fix it."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.model.framework import build_framework
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
    with pytest.raises(ValueError, match=r"frame size 40x40 \(HxW\).*multiples of 16.*image_size"):
        build_framework(cfg)(examples)


def test_frame_count_disagreeing_with_config(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    with pytest.raises(ValueError, match="samples carry 3 frames but the config gives 5"):
        model(tiny_examples(cfg, frames=3))


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
    assert tiny_cosmos.main(["--out", str(out)]) == 1
    assert "exists and is not empty; pass --overwrite" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["existing"]  # no staging folder left behind
