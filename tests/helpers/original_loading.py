"""The original DiT4DiT's `baseframework.from_pretrained(checkpoint)`, as the round-trip tests run it.

With DIT4DIT_ORIGINAL pointing at a checkout of the original, its own code runs (in a process of its own, its
checkout first on the path). Otherwise a stand-in follows its loading path step by step (UPSTREAM_SPEC 4.3, 5.8):
`<run_dir>/config.yaml` loaded and resolved with OmegaConf, `trainer.pretrained_checkpoint` set to None, every key
its framework and action head read taken by attribute access (a key the file lacks fails as it does there:
`Missing key ...`), `dataset_statistics.json` read, and the checkpoint loaded strictly into a model of the same
parameter names and shapes (ours, the compatibility contract).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

ORIGINAL_ENV = "DIT4DIT_ORIGINAL"
ORIGINAL_YAMLS = ["libero/dit4dit_libero.yaml", "robocasa/dit4dit_robocasa_gr1.yaml", "real_robot/dit4dit_g1.yaml"]
OUR_YAMLS = ["robotwin/dit4dit_robotwin.yaml"]
MODEL_KEYS = ("--framework.", "--trainer.freeze_modules")
# The tiny model's sizes, for a config written for the 2B model (widths stay as the config has them).
TINY_MODEL = [
    "--framework.cosmos25.torch_dtype=float32", "--framework.cosmos25.extract_layer=2",
    "--framework.cosmos25.max_sequence_length=64", "--framework.cosmos25.vl_hidden_dim=32",
    "--framework.action_model.hidden_size=64", "--framework.action_model.diffusion_model_cfg.cross_attention_dim=32",
    "--framework.action_model.diffusion_model_cfg.num_layers=2", "--framework.action_model.diffusion_model_cfg.output_dim=64",
    "--framework.action_model.diffusion_model_cfg.num_attention_heads=2",
    "--framework.action_model.diffusion_model_cfg.attention_head_dim=16",
    "--trainer.freeze_modules=backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae",
    "--trainer.mixed_precision='no'", "--trainer.max_train_steps=2", "--trainer.save_interval=2",
    "--trainer.num_warmup_steps=1", "--trainer.logging_frequency=1", "--datasets.vla_data.image_size=32", "--datasets.vla_data.per_device_batch_size=2",
    "--datasets.vla_data.num_workers=0", "--datasets.vla_data.holdout_episodes=0", "--trackers=[jsonl]",
]
# Read without a default by the original's framework, backbone interface and action head when they are built.
ORIGINAL_READS = (
    "framework.name",
    *(f"framework.cosmos25.{k}" for k in ("base_model", "extract_layer", "training", "vl_hidden_dim",
                                          "conditional_frame_timestep", "future_loss_type",
                                          "flow_matching.time_distribution", "flow_matching.high_sigma_ratio",
                                          "flow_matching.high_sigma_min")),
    *(f"framework.action_model.{k}" for k in (
        "action_model_type", "hidden_size", "action_dim", "state_dim", "future_action_window_size",
        "past_action_window_size", "action_horizon", "add_pos_embed", "max_seq_len", "noise_beta_alpha",
        "noise_beta_beta", "noise_s", "num_timestep_buckets", "num_inference_timesteps")),
    *(f"framework.action_model.diffusion_model_cfg.{k}" for k in (
        "cross_attention_dim", "dropout", "final_dropout", "interleave_self_attention", "norm_type", "num_layers",
        "output_dim", "positional_embeddings")),
    "datasets.vla_data.video_delta_indices",
    "datasets.vla_data.action_video_freq_ratio",
    "trainer.repeated_diffusion_steps",
)
# Read by the original's training (its data loader), which a run folder's config.yaml must also carry to be
# trained on there.
ORIGINAL_TRAINING_READS = ("datasets.vla_data.dataset_py",)


def _read(config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)  # ConfigAttributeError: Missing key <part>, as in the original
    return node


def load_as_the_original(checkpoint: Path) -> torch.nn.Module:
    """The model the original's from_pretrained gives for `checkpoint` (`<run_dir>/<folder>/<name>.pt`)."""
    original = os.environ.get(ORIGINAL_ENV)
    if original:
        return _load_in_the_original(Path(original), checkpoint)
    from DiT4DiT.config.schema import load_config
    from DiT4DiT.model.framework import build_framework

    run_dir = checkpoint.parents[1]
    config = OmegaConf.load(run_dir / "config.yaml")
    OmegaConf.resolve(config)
    config.trainer.pretrained_checkpoint = None
    for key in (*ORIGINAL_READS, *ORIGINAL_TRAINING_READS):
        _read(config, key)
    json.loads((run_dir / "dataset_statistics.json").read_text())
    model = build_framework(load_config(run_dir / "config.yaml"))
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True), strict=True)
    return model


def _load_in_the_original(checkout: Path, checkpoint: Path) -> None:
    code = ("import sys; from DiT4DiT.model.framework.base_framework import baseframework; "
            "baseframework.from_pretrained(sys.argv[1]); print('loaded')")
    result = subprocess.run([sys.executable, "-c", code, str(checkpoint)], cwd=checkout, capture_output=True,
                            text=True, env=dict(os.environ, PYTHONPATH=str(checkout)), timeout=900)
    assert result.returncode == 0 and "loaded" in result.stdout, result.stderr[-3000:]
