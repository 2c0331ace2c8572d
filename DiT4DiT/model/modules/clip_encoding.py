"""A clip through the Wan VAE's encoder: the posterior the backbone conditions on and trains towards.

One VAE call gives both: the Wan VAE is causal, so latent frame 0 depends on pixel frame 0 alone and equals the
posterior of that frame encoded on its own (bit for bit at the test and the full width, float32 and bf16;
docs/training.md), while the later latent frames are the future losses' targets. The latent store holds this
posterior for every clip of a dataset; without it, training computes it each step here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from DiT4DiT.facts import latent_frame_count, vae_clip_frames


@dataclass
class ClipPosterior:
    """A clip's VAE posterior as the VAE computes it (its dtype, not normalised): what the latent store holds."""

    mean: torch.Tensor  # (B, C, T_lat, h, w): each latent frame's mean (the future losses' targets)
    std: torch.Tensor  # (B, C, 1, h, w): the conditioning frame's std (its sample conditions the transformer)


def vae_frames(video: torch.Tensor, temporal_factor: int, with_future: bool) -> torch.Tensor:
    """The frames the VAE encodes, (B, 3, T', H, W) in [-1, 1], of a (B, T, 3, H, W) clip in [0, 1]: the
    conditioning frame alone, or (`with_future`, at least 1 + temporal_factor frames) the clip up to its last whole
    group of `temporal_factor` frames (the VAE ignores the frames after it)."""
    used = vae_clip_frames(video.shape[1], temporal_factor) if with_future else 1
    # contiguous: the VAE's convolutions then see the layout (and give the numbers) a stacked clip gives
    return (video[:, :used].transpose(1, 2) * 2.0 - 1.0).contiguous()


def encode_clip(vae: torch.nn.Module, pixels: torch.Tensor, num_latent: int) -> ClipPosterior:
    """The posterior of (B, 3, T', H, W) frames in [-1, 1] (vae_frames), its first `num_latent` latent frames.

    A trainable VAE gets its gradient through the conditioning frame only (encoded on its own, as the original
    does); the targets never carry one."""
    pixels = pixels.to(vae.dtype)
    if torch.is_grad_enabled() and any(p.requires_grad for p in vae.parameters()):
        frame = vae.encode(pixels[:, :, :1]).latent_dist
        if pixels.shape[2] == 1 or num_latent == 1:
            return ClipPosterior(frame.mean, frame.std)
        with torch.no_grad():
            future = vae.encode(pixels).latent_dist.mean[:, :, 1:num_latent]
        return ClipPosterior(torch.cat([frame.mean, future], dim=2), frame.std)
    with torch.no_grad():
        posterior = vae.encode(pixels).latent_dist
    return ClipPosterior(posterior.mean[:, :, :num_latent], posterior.std[:, :, :1])


def clip_posterior(vae: torch.nn.Module, video: torch.Tensor, num_frames_out: int, temporal_factor: int,
                   with_future: bool) -> ClipPosterior:
    """The posterior of a (B, T, 3, H, W) clip in [0, 1] with `num_frames_out` frames per camera: the conditioning
    frame's alone, or (`with_future`) with the latent frames the future losses use."""
    num_latent = latent_frame_count(num_frames_out, temporal_factor) if with_future else 1
    return encode_clip(vae, vae_frames(video, temporal_factor, with_future), num_latent)


def load_vae(folder: str | Path, torch_dtype: torch.dtype, local_files_only: bool = True) -> torch.nn.Module:
    """The snapshot's VAE alone (the latent store's tool needs nothing else), in eval mode."""
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan.from_pretrained(Path(folder) / "vae", torch_dtype=torch_dtype,
                                            local_files_only=local_files_only).eval()


def encoding_autocast(device: torch.device, mixed_precision: str) -> Any:
    """The autocast a training step encodes clips under (the framework's bf16 sites: on where an accelerator runs
    the step, with trainer.mixed_precision=bf16), for encoding them outside a step (the latent store): the same
    context gives the same numbers."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type != "cpu" and mixed_precision == "bf16")
