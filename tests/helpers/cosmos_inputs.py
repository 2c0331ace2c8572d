"""Inputs for a Cosmos transformer, shaped as the backbone passes them: latents and condition mask, per-frame
timesteps, projected-text-ready embeddings and the padding mask (in pixels, 8x the latent size)."""

from __future__ import annotations

import torch


def transformer_inputs(config, batch: int = 2, frames: int = 2, height: int = 8, width: int = 8, text_tokens: int = 12,
                       seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> dict:
    """`height`/`width` are latent sizes; `config` is the transformer's (its in/out and text channels)."""
    generator = torch.Generator().manual_seed(seed)
    text_width = config.crossattn_proj_in_channels if config.use_crossattn_projection else config.text_embed_dim
    tensors = dict(
        hidden_states=torch.randn(batch, config.out_channels, frames, height, width, generator=generator),
        condition_mask=torch.zeros(batch, 1, frames, height, width),
        timestep=torch.rand(batch, 1, frames, 1, 1, generator=generator),
        encoder_hidden_states=torch.randn(batch, text_tokens, text_width, generator=generator),
        padding_mask=torch.zeros(1, 1, height * 8, width * 8),
    )
    return {**{name: t.to(device, dtype) for name, t in tensors.items()}, "return_dict": False}
