"""Saving and loading: the tiny pipeline folder, and DiT4DiT.from_pretrained on a run dir."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from DiT4DiT.config.sections import TrainerSection
from DiT4DiT.config.typed import section
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.framework.DiT4DiT import DiT4DiT
from DiT4DiT.model.framework.base_framework import RunFolderError
from DiT4DiT.model.modules.cosmos_pipeline import load_cosmos_components
from DiT4DiT.model.freezing import left_out_of_checkpoints
from DiT4DiT.model.modules.prompt_encoding import tokenize_prompts
from DiT4DiT.model.modules.weights import CheckpointMismatchError
from DiT4DiT.tools.tiny_cosmos import build_tiny_pipeline


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def _public(config) -> dict:
    return {k: v for k, v in config.items() if not k.startswith("_")}  # "_use_default_values" is bookkeeping


def test_tiny_pipeline_save_load_round_trip(tiny_pipeline_dir):
    built = build_tiny_pipeline(seed=0)
    loaded = load_cosmos_components(tiny_pipeline_dir, "float32", "sdpa")
    for name in ("text_encoder", "transformer", "vae"):
        _assert_same_weights(getattr(built, name), getattr(loaded, name))
    assert _public(built.scheduler.config) == _public(loaded.scheduler.config)
    torch.testing.assert_close(built.latents_std, loaded.latents_std)
    prompts = ["pick up the red block", "unseen words: zebra quartz"]
    assert torch.equal(tokenize_prompts(built.tokenizer, prompts, 64), tokenize_prompts(loaded.tokenizer, prompts, 64))
    rendered = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "open the drawer"}]}], tokenize=False
    )
    assert rendered == "<|im_start|>user\nopen the drawer<|im_end|>\n"


def test_tiny_pipeline_is_seeded():
    first, again, other = build_tiny_pipeline(seed=0), build_tiny_pipeline(seed=0), build_tiny_pipeline(seed=1)
    _assert_same_weights(first.transformer, again.transformer)
    assert not torch.equal(first.transformer.proj_out.weight, other.transformer.proj_out.weight)


def _write_run(model, run_dir, state_dict) -> str:
    (run_dir / "checkpoints").mkdir(parents=True)
    OmegaConf.save(model.config, run_dir / "config.yaml")
    (run_dir / "dataset_statistics.json").write_text(json.dumps({"robotwin": {"action": {"min": [0.0]}}}))
    path = run_dir / "checkpoints" / "steps_10_pytorch_model.pt"
    torch.save(state_dict, path)
    return path


def _trainable_state(model) -> dict[str, torch.Tensor]:
    """What the trainer saves: everything but the modules the config says its checkpoints leave out."""
    left_out = tuple(path + "." for path in left_out_of_checkpoints(section(model.config.trainer, TrainerSection)))
    return {k: v for k, v in model.state_dict().items() if not k.startswith(left_out)}


def test_from_pretrained_restores_trained_weights(tiny_model_cfg, tmp_path):
    model = build_framework(tiny_model_cfg())
    with torch.no_grad():
        trained = [model.action_model, model.backbone_interface.extractor.transformer]
        for p in (p for module in trained for p in module.parameters()):
            p.add_(torch.randn_like(p))
    path = _write_run(model, tmp_path / "run", _trainable_state(model))

    loaded = DiT4DiT.from_pretrained(path)
    _assert_same_weights(model, loaded)  # text encoder and VAE come back from the base snapshot
    assert loaded.norm_stats == {"robotwin": {"action": {"min": [0.0]}}}


def test_from_pretrained_rejects_unknown_keys(tiny_model_cfg, tmp_path):
    model = build_framework(tiny_model_cfg())
    state = _trainable_state(model)
    state["action_model.vl_self_attention.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointMismatchError, match="1 keys are not in the model.*vl_self_attention"):
        DiT4DiT.from_pretrained(_write_run(model, tmp_path / "run", state))


def test_from_pretrained_rejects_missing_trained_weights(tiny_model_cfg, tmp_path):
    model = build_framework(tiny_model_cfg())
    state = _trainable_state(model)
    del state["action_model.action_decoder.layer2.bias"]
    with pytest.raises(CheckpointMismatchError, match="1 trained weights are missing.*action_decoder.layer2.bias"):
        DiT4DiT.from_pretrained(_write_run(model, tmp_path / "run", state))


def test_from_pretrained_rejects_wrong_shapes(tiny_model_cfg, tmp_path):
    model = build_framework(tiny_model_cfg())
    state = _trainable_state(model)
    state["action_model.position_embedding.weight"] = torch.zeros(10, 32)
    # The run's config and the checkpoint disagree: both are named (the key, the tensor and its shape).
    with pytest.raises(RunFolderError, match="max_seq_len=1024 but .*position_embedding.weight of shape \\[10, 32\\]"):
        DiT4DiT.from_pretrained(_write_run(model, tmp_path / "run", state))


def test_from_pretrained_needs_the_run_config(tmp_path):
    path = tmp_path / "run" / "final_model" / "pytorch_model.pt"
    path.parent.mkdir(parents=True)
    torch.save({}, path)
    with pytest.raises(FileNotFoundError, match="Missing `config.yaml` for run_dir"):
        DiT4DiT.from_pretrained(path)
