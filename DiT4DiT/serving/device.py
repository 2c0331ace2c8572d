"""The serving side's one device seam: which device to run on, with torch_npu loaded the way the NPU patch does.

This is the only serving module that names a device type. On an Ascend host `import torch_npu` registers the
"npu" device and `transfer_to_npu` maps the model's CUDA calls (its torch.autocast("cuda", ...) sites) onto it,
as in the patched trainer; on CPU/CUDA hosts torch_npu is absent and nothing here touches it. The rule is the
patch's: only a host without torch_npu falls back; an installed torch_npu that fails to load is a DeviceError.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging

import torch

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.facts import DEVICE_KINDS

log = logging.getLogger(__name__)

DEVICE_CHOICES = ("auto", *DEVICE_KINDS)


class DeviceError(DiT4DiTError, RuntimeError):
    """The requested device is not usable here; the message says why and what to pass instead."""

    exit_code = 2


def _load_torch_npu() -> bool:
    """Import torch_npu and transfer_to_npu: False when torch_npu is not installed, DeviceError when it fails to load."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    for module in ("torch_npu", "torch_npu.contrib.transfer_to_npu"):
        try:
            importlib.import_module(module)
        except Exception as error:  # no CANN environment, a missing dependency: an install to fix, not a CPU run
            raise DeviceError(f"torch_npu is installed but importing {module} failed ({error!r}); source CANN's "
                              "set_env.sh and install requirements-npu.txt, or uninstall torch-npu to serve on "
                              "CPU/CUDA") from error
    return True


def select_device(requested: str = "auto") -> torch.device:
    """npu (torch_npu with a visible device), else cuda, else cpu for "auto"; the named one otherwise."""
    if requested not in DEVICE_CHOICES:
        raise DeviceError(f"--device {requested!r}: use one of {', '.join(DEVICE_CHOICES)}")
    if requested == "cpu":
        return torch.device("cpu")
    npu_loaded = requested in ("auto", "npu") and _load_torch_npu()
    if npu_loaded and torch.npu.is_available():
        return torch.device("npu", 0)
    if requested == "npu":
        reason = "torch_npu sees no NPU device" if npu_loaded else "torch_npu is not installed"
        raise DeviceError(f"--device npu: {reason}; source CANN's set_env.sh and check `npu-smi info`, "
                          "or pass --device cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    if requested == "cuda":
        raise DeviceError("--device cuda: torch sees no CUDA device; pass --device cpu (or npu on an Ascend host)")
    if npu_loaded:
        log.warning("torch_npu is installed but sees no NPU device; serving on the CPU")
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU): what a stage timer must do at each
    boundary, since kernels run asynchronously on an accelerator."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize(device)
