"""Host-to-device copies that do not make the device wait: each step's inputs go through pinned host memory,
and a batch of examples' numeric fields (actions, mask, state) become one typed ActionBatch on the device here.

A copy from pageable host memory is synchronous (the stream stalls until the host buffer is staged); from pinned
memory with non_blocking=True it is queued on the stream and the host goes on. Pinned memory needs an accelerator
runtime, so on a host without one (and for a CPU target) tensors are only converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


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


@dataclass(frozen=True)
class ActionBatch:
    """What the action head reads of a batch of examples, on the device; built by action_batch, once per forward."""

    actions: torch.Tensor | None  # (B, chunk, action_dim) in the head's dtype; None when predicting
    mask: torch.Tensor | None  # (B, chunk, action_dim) bool; None when predicting
    state: torch.Tensor | None  # (B, 1, state_dim) in the head's dtype; None when the examples or the head have none


def action_batch(examples: list[dict], device: torch.device, dtype: torch.dtype, *, targets: bool,
                 state: bool) -> ActionBatch:
    """The examples' action chunks and masks (`targets`) and states (`state`) as one ActionBatch on `device`."""
    device = torch.device(device)
    return ActionBatch(
        actions=_stack_examples(examples, "action", device, dtype) if targets else None,
        mask=_stack_examples(examples, "action_mask", device, torch.bool) if targets else None,
        state=_stack_examples(examples, "state", device, dtype) if state else None,
    )


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
