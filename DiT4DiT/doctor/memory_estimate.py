"""Rough per-device memory need of a training run, from safetensors headers and the config.

Static part, exact up to the action head: frozen weights in bf16 (2 B/param) and, per trainable parameter,
bf16 weights and gradients (2 + 2 B) plus fp32 master weights and Adam moments (12 B) that DeepSpeed ZeRO-2
shares across the processes. Activations follow the transformer rule of thumb of about 34 bytes per token per
hidden unit per layer in bf16 with fused attention (Korthikanti et al., 2022); the token count comes from the
frames, views and image size. Treat the total as +-30%: it tells 40 GB from 90 GB, not 60 from 64.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from DiT4DiT.facts import (DIT_SIZES, PATCH_SIZE, VAE_SPATIAL_FACTOR, is_under, latent_frame_count, module_paths,
                           num_output_frames)

GIB = 1024**3
ACTIVATION_BYTES_PER_TOKEN_UNIT = 34


def safetensors_param_count(folder: Path) -> int | None:
    """Parameters stored in the *.safetensors files of a folder (header only), or None when there are none."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    return total


def action_head_params(cfg) -> int:
    """Approximate size of the flow-matching action DiT (blocks dominate: ~12 d^2 per block plus cross-attention)."""
    dit = cfg.framework.action_model.diffusion_model_cfg
    heads, width = DIT_SIZES[cfg.framework.action_model.action_model_type]
    d = (dit.num_attention_heads or heads) * (dit.attention_head_dim or width)
    blocks = dit.num_layers * (12 * d * d + 2 * d * dit.cross_attention_dim)
    mlps = 4 * cfg.framework.action_model.hidden_size**2
    return blocks + mlps


@dataclass(frozen=True)
class Estimate:
    static_gib: float
    activation_gib: float
    tokens_per_sample: int

    @property
    def total_gib(self) -> float:
        return self.static_gib + self.activation_gib


PARTS = {name: f"backbone_interface.extractor.{name}" for name in ("text_encoder", "transformer", "vae")}


def is_frozen(module: str, freeze_modules: str | None) -> bool:
    """Whether `trainer.freeze_modules` freezes `module`: it names the module or one that contains it."""
    return is_under(module, module_paths(freeze_modules))


def checkpointing(cfg) -> bool:
    return bool(cfg.trainer.get("enable_gradient_checkpointing", False))


def mixture_views(data_mix: str, data_config: str = "auto") -> int:
    """Cameras side by side in a sample of the mixture (the widest of its data configs)."""
    from DiT4DiT.dataloader.mixtures import resolve_data_mix  # imports the data package only here
    from DiT4DiT.dataloader.modality import entry_config

    return max(len(entry_config(entry).video_keys) for entry in resolve_data_mix(data_mix, data_config))


def estimate_training_memory(base_model: Path, cfg, num_processes: int, views: int, zero_stage: int = 2,
                             device_kind: str = "npu") -> Estimate | None:
    """Per-device GiB for `cfg` on `num_processes` devices with `views` cameras side by side per frame, or None
    when the snapshot has no safetensors. ZeRO-3 also shares the bf16 weights and gradients; with
    trainer.enable_gradient_checkpointing only each block's input is kept, and one block's activations are
    rebuilt at a time. `device_kind` (npu, cuda or cpu) is for device-specific activations."""
    base_model = Path(base_model)
    parts = {p: safetensors_param_count(base_model / p) for p in PARTS}
    if any(v is None for v in parts.values()):
        return None
    parts["action_model"] = action_head_params(cfg)
    modules = {**PARTS, "action_model": "action_model"}
    frozen_parts = {p for p, module in modules.items() if is_frozen(module, cfg.trainer.freeze_modules)}
    frozen = sum(n for p, n in parts.items() if p in frozen_parts)
    trainable = sum(n for p, n in parts.items() if p not in frozen_parts)
    shards = max(num_processes, 1)
    static = (2 * frozen + 4 * trainable) / (shards if zero_stage >= 3 else 1) + 12 * trainable / (shards if zero_stage else 1)

    tcfg = json.loads((base_model / "transformer" / "config.json").read_text())
    hidden = tcfg["num_attention_heads"] * tcfg["attention_head_dim"]
    data = cfg.datasets.vla_data
    latent_frames = latent_frame_count(num_output_frames(data.video_delta_indices, data.action_video_freq_ratio))
    side = VAE_SPATIAL_FACTOR * PATCH_SIZE
    tokens = latent_frames * (data.image_size // side) * (views * data.image_size // side)
    per_layer = 2 + ACTIVATION_BYTES_PER_TOKEN_UNIT / tcfg["num_layers"] if checkpointing(cfg) else ACTIVATION_BYTES_PER_TOKEN_UNIT
    activations = per_layer * tokens * hidden * tcfg["num_layers"] * data.per_device_batch_size
    return Estimate(static_gib=static / GIB, activation_gib=activations / GIB, tokens_per_sample=tokens)
