"""The serving side's one device seam: which device to run on, with torch_npu loaded the way the NPU patch does.

This is the only serving module that names a device type. On an Ascend host `import torch_npu` registers the
"npu" device and `transfer_to_npu` maps the model's CUDA calls (its torch.autocast("cuda", ...) sites) onto it,
as in the patched trainer; on CPU/CUDA hosts torch_npu is absent and nothing here touches it.
"""

from __future__ import annotations

import importlib
import logging

import torch

log = logging.getLogger(__name__)

DEVICE_CHOICES = ("auto", "npu", "cuda", "cpu")


class DeviceError(RuntimeError):
    """The requested device is not usable here; the message says why and what to pass instead."""


def _load_torch_npu() -> Exception | None:
    """Import torch_npu and transfer_to_npu; the import error when they are not installed."""
    try:
        importlib.import_module("torch_npu")
        importlib.import_module("torch_npu.contrib.transfer_to_npu")
    except ImportError as error:
        return error
    return None


def select_device(requested: str = "auto") -> torch.device:
    """npu (torch_npu with a visible device), else cuda, else cpu for "auto"; the named one otherwise."""
    if requested not in DEVICE_CHOICES:
        raise DeviceError(f"--device {requested!r}: use one of {', '.join(DEVICE_CHOICES)}")
    if requested == "cpu":
        return torch.device("cpu")
    npu_error = _load_torch_npu() if requested in ("auto", "npu") else None
    if requested in ("auto", "npu") and npu_error is None and torch.npu.is_available():
        return torch.device("npu", 0)
    if requested == "npu":
        reason = f"torch_npu is not importable ({npu_error})" if npu_error else "torch_npu sees no NPU device"
        raise DeviceError(f"--device npu: {reason}; source CANN's set_env.sh and check `npu-smi info`, "
                          "or pass --device cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    if requested == "cuda":
        raise DeviceError("--device cuda: torch sees no CUDA device; pass --device cpu (or npu on an Ascend host)")
    if npu_error is None:
        log.warning("torch_npu is installed but sees no NPU device; serving on the CPU")
    return torch.device("cpu")
