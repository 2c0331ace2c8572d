"""Test double for `torch_npu` (Ascend's PyTorch backend), for hosts without an NPU or CANN.

Put `tests/fakes/torch_npu` on PYTHONPATH. Like the real package at import, it names torch's
PrivateUse1 backend "npu" and registers a `torch.npu` device module that lists the autocast dtypes,
so `torch.autocast("npu", ...)` can be entered. Unlike the real one it has no kernels, no devices
(`torch.npu.is_available()` is False, so accelerate stays on CPU) and no CANN: tensors stay on
CPU, where an npu autocast changes nothing. Its fused kernels are operators (torch.ops.npu.*, with their
derivatives), as the real ones are; `torch_npu.onnx` swaps the attribute for a forward-only Function, as the real
one does. DeepSpeed picks its NPU accelerator whenever
`import torch_npu` works, so runs with this fake set DS_ACCELERATOR=cpu.

FAKE_TORCH_NPU_BROKEN makes it an installed-but-broken torch_npu, with the errors a real host shows:
`import` fails as without CANN's environment (libascendcl.so not found), `transfer_to_npu` fails as
on a venv without setuptools (it imports torch.utils.cpp_extension).
"""

import os

import torch

if os.environ.get("FAKE_TORCH_NPU_BROKEN") == "import":
    raise ImportError("libascendcl.so: cannot open shared object file: No such file or directory")

from torch_npu import library, npu  # noqa: F401  library registers the fused kernels as torch.ops.npu.*
from torch_npu.ops import CALLS  # noqa: F401

npu_rotary_mul = torch.ops.npu.npu_rotary_mul  # the attribute, until torch_npu.onnx replaces it (see there)

torch.utils.rename_privateuse1_backend("npu")
torch._register_device_module("npu", npu)
