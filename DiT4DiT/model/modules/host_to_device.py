"""Host-to-device copies that do not make the device wait: each step's inputs go through pinned host memory,
and a batch of examples (frames, instruction, actions, mask, state) becomes one typed ModelBatch on the device
here, the model's one conversion of its input.

A copy from pageable host memory is synchronous (the stream stalls until the host buffer is staged); from pinned
memory with non_blocking=True it is queued on the stream and the host goes on. Pinned memory needs an accelerator
runtime, so on a host without one (and for a CPU target) tensors are only converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from DiT4DiT.model.modules.clip_encoding import ClipPosterior


def _pins(device: torch.device) -> bool:
    """Whether `device` is an accelerator with a runtime here: torch.cuda, or torch.npu once torch_npu is loaded."""
    runtime = getattr(torch, device.type, None) if device.type != "cpu" else None
    return runtime is not None and hasattr(runtime, "is_available") and runtime.is_available()


def to_device(host: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`host` in `dtype` on `device`, copied once without waiting. The dtype is converted on the host first: a
    cross-device copy that also converts would convert into an unpinned temporary and copy that synchronously."""
    device = torch.device(device)
    host = host if dtype is None else host.to(dtype)
    if _pins(device) and not host.is_pinned():
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def stack_to_device(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """torch.stack(tensors) on `device`: stacked straight into pinned host memory, then copied once."""
    device = torch.device(device)
    first = tensors[0]
    host = torch.empty((len(tensors), *first.shape), dtype=first.dtype, pin_memory=_pins(device))
    torch.stack(tensors, out=host)
    return host.to(device, non_blocking=True)


def frame_to_tensor(frame) -> torch.Tensor:
    """A frame (torch CHW/HWC, numpy HWC, or PIL) as a float (3, H, W) tensor in [0, 1]."""
    if hasattr(frame, "convert"):  # PIL image
        frame = np.asarray(frame.convert("RGB"))
    tensor = torch.as_tensor(frame)
    if tensor.ndim == 2:
        tensor = tensor.unsqueeze(0)
    elif tensor.shape[0] not in (1, 3, 4) and tensor.shape[-1] in (1, 3, 4):
        tensor = tensor.permute(2, 0, 1)
    if tensor.ndim != 3 or tensor.shape[0] not in (1, 3, 4):
        raise ValueError(f"an image frame must be (3, H, W) or (H, W, 3); got shape {tuple(tensor.shape)}")
    if tensor.shape[0] == 4:  # RGBA
        tensor = tensor[:3]
    elif tensor.shape[0] == 1:  # grayscale
        tensor = tensor.expand(3, -1, -1)
    is_bytes = tensor.dtype == torch.uint8
    tensor = tensor.float()
    if is_bytes or tensor.max() > 1.0:
        tensor = tensor / 255.0
    return tensor


@dataclass(frozen=True)
class ModelBatch:
    """A batch of examples as the model reads it, on the device; built by model_batch, once per forward."""

    video: torch.Tensor | None  # (B, T, 3, H, W) float in [0, 1]; frame 0 conditions, the rest are future frames
    instructions: list[str]
    actions: torch.Tensor | None  # (B, chunk, action_dim) in the head's dtype; None when predicting
    mask: torch.Tensor | None  # (B, chunk, action_dim) bool; None when predicting
    state: torch.Tensor | None  # (B, 1, state_dim) in the head's dtype; None when the examples or the head have none
    posterior: ClipPosterior | None = None  # the clips' stored VAE posterior, in place of video (the latent store)
    prompt_embeds: torch.Tensor | None = None  # (B, L, D) the instructions' stored embeddings (the prompt store)


def model_batch(examples: list[dict], device: torch.device, dtype: torch.dtype, *, targets: bool, state: bool,
                current_frame_only: bool = False, stored_prompts: list[torch.Tensor] | None = None) -> ModelBatch:
    """The examples' frames (or their stored VAE posterior, `latents`) and instructions, action chunks and masks
    (`targets`) and states (`state`) as one ModelBatch on `device`; `current_frame_only` keeps each example's first
    frame (what conditions a prediction); `stored_prompts`: the instructions' embeddings from the prompt store, on
    the host (CosmosFeatureExtractor.stored_prompts), which travel with the rest."""
    device = torch.device(device)
    stored = "latents" in examples[0]
    return ModelBatch(
        video=None if stored else stack_to_device(_frames(examples, current_frame_only), device),
        posterior=_posterior(examples, device, current_frame_only) if stored else None,
        instructions=[example["lang"] for example in examples],
        actions=_stack_examples(examples, "action", device, dtype) if targets else None,
        mask=_stack_examples(examples, "action_mask", device, torch.bool) if targets else None,
        state=_stack_examples(examples, "state", device, dtype) if state else None,
        prompt_embeds=stack_to_device(stored_prompts, device) if stored_prompts is not None else None,
    )


def _posterior(examples: list[dict], device: torch.device, current_frame_only: bool) -> ClipPosterior:
    """The examples' stored posteriors ({"mean": (C, T_lat, h, w), "std": (C, 1, h, w)}) stacked on `device`."""
    frames = 1 if current_frame_only else None
    return ClipPosterior(stack_to_device([e["latents"]["mean"][:, :frames] for e in examples], device),
                         stack_to_device([e["latents"]["std"] for e in examples], device))


def _frames(examples: list[dict], current_frame_only: bool) -> list[torch.Tensor]:
    """Each example's frames as one (T, 3, H, W) host tensor; every example must give the same shape."""
    samples = []
    for index, example in enumerate(examples):
        frames = example["image"] if isinstance(example["image"], (list, tuple)) else [example["image"]]
        if current_frame_only:
            frames = frames[:1]
        samples.append(torch.stack([frame_to_tensor(f) for f in frames]))
        if samples[-1].shape != samples[0].shape:
            raise ValueError(
                f"sample {index} has frames {tuple(samples[-1].shape)} (T, C, H, W) but sample 0 has "
                f"{tuple(samples[0].shape)}; every sample in a batch needs the same frame count and size"
            )
    return samples


def _stack_examples(examples: list[dict], key: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """example[key] of every example as one (B, ...) tensor: stacked on the host, converted to `dtype` while it is
    copied into pinned memory, then copied once to `device` without waiting."""
    if key not in examples[0]:
        raise ValueError(
            f"examples lack '{key}'; the data loader's example dicts carry image, lang, action, state, action_mask"
        )
    stacked = torch.as_tensor(np.stack([np.asarray(example[key]) for example in examples]))
    host = torch.empty(stacked.shape, dtype=dtype, pin_memory=_pins(device))
    host.copy_(stacked)
    return host.to(device, non_blocking=True)
