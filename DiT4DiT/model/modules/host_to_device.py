"""Host-to-device copies that do not make the device wait: each step's inputs go through pinned host memory.

A copy from pageable host memory is synchronous (the stream stalls until the host buffer is staged); from pinned
memory with non_blocking=True it is queued on the stream and the host goes on. Pinned memory needs an accelerator
runtime, so on a host without one (and for a CPU target) tensors are only converted.
"""

from __future__ import annotations

from typing import Sequence

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
