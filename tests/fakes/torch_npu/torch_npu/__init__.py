"""Test double for `torch_npu` (Ascend's PyTorch backend), for hosts without an NPU or CANN.

Put `tests/fakes/torch_npu` on PYTHONPATH. Like the real package at import, it names torch's
PrivateUse1 backend "npu" and registers a `torch.npu` device module that lists the autocast dtypes,
so `torch.autocast("npu", ...)` can be entered. Unlike the real one it has no kernels, no devices
(`torch.npu.is_available()` is False, so accelerate stays on CPU) and no CANN: tensors stay on
CPU, where an npu autocast changes nothing. DeepSpeed picks its NPU accelerator whenever
`import torch_npu` works, so runs with this fake set DS_ACCELERATOR=cpu.
"""

import torch

from torch_npu import npu

torch.utils.rename_privateuse1_backend("npu")
torch._register_device_module("npu", npu)
