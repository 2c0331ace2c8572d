"""Random inputs shaped as the model receives them, for measurements and benchmarks (and the tests' fixtures):
example dicts as the data loader collates them, and a Cosmos transformer's inputs as the backbone passes them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.facts import VAE_SPATIAL_FACTOR


def make_examples(cfg: ConfigSections, batch: int = 2, views: int = 1, frames: int | None = None, seed: int = 0) -> list[dict]:
    """Example dicts shaped like the data loader's for `cfg` (views side by side, frames in [0, 1])."""
    vla = cfg.datasets.vla_data
    if frames is None:
        frames = vla.num_frames
    size, chunk = int(vla.image_size), cfg.framework.action_model.chunk_length
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    action_mask: np.ndarray = np.ones((chunk, vla.max_action_dim), dtype=bool)
    action_mask[:, -2:] = False  # two padded action dims, as when a robot has fewer than max_action_dim
    return [
        {
            "image": [torch.rand(3, size, size * views, generator=generator) for _ in range(frames)],
            "lang": ["pick up the red block", "open the drawer", "stack the cups"][index % 3],
            "action": rng.uniform(-1, 1, (chunk, vla.max_action_dim)).astype(np.float32) * action_mask,
            "state": rng.uniform(-1, 1, (1, vla.max_state_dim)).astype(np.float32),
            "action_mask": action_mask,
            "state_mask": np.ones((1, vla.max_state_dim), dtype=bool),
        }
        for index in range(batch)
    ]


def transformer_inputs(config: Any, batch: int = 2, frames: int = 2, height: int = 8, width: int = 8, text_tokens: int = 12,
                       seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> dict:
    """Inputs of a Cosmos transformer whose (diffusers) config is `config`: latents of `height` x `width` and the condition
    mask, per-frame timesteps (float32, as the backbone passes them), text embeddings at the width the transformer
    projects from, and the padding mask in pixels; every other tensor in `dtype`."""
    generator = torch.Generator().manual_seed(seed)
    text_width = config.crossattn_proj_in_channels if config.use_crossattn_projection else config.text_embed_dim
    tensors = dict(
        hidden_states=torch.randn(batch, config.out_channels, frames, height, width, generator=generator),
        condition_mask=torch.zeros(batch, 1, frames, height, width),
        timestep=torch.rand(batch, 1, frames, 1, 1, generator=generator),
        encoder_hidden_states=torch.randn(batch, text_tokens, text_width, generator=generator),
        padding_mask=torch.zeros(1, 1, height * VAE_SPATIAL_FACTOR, width * VAE_SPATIAL_FACTOR),
    )
    return {**{name: t.to(device, torch.float32 if name == "timestep" else dtype) for name, t in tensors.items()},
            "return_dict": False}
