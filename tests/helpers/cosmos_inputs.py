"""Inputs for the tiny Cosmos transformer (DiT4DiT.tools.tiny_cosmos.build_transformer), as the backbone passes them."""

from __future__ import annotations

import torch

from DiT4DiT.tools.tiny_cosmos import LATENT_CHANNELS, TEXT_HIDDEN, TEXT_LAYERS


def transformer_inputs(batch: int = 2, frames: int = 2, size: int = 8, seed: int = 0) -> dict:
    """What the backbone passes: latents and condition mask, per-frame timesteps, text embeddings, padding mask."""
    generator = torch.Generator().manual_seed(seed)
    return dict(
        hidden_states=torch.randn(batch, LATENT_CHANNELS, frames, size, size, generator=generator),
        condition_mask=torch.zeros(batch, 1, frames, size, size),
        timestep=torch.rand(batch, 1, frames, 1, 1, generator=generator),
        encoder_hidden_states=torch.randn(batch, 12, TEXT_HIDDEN * TEXT_LAYERS, generator=generator),
        padding_mask=torch.zeros(1, 1, size * 8, size * 8),
        return_dict=False,
    )
