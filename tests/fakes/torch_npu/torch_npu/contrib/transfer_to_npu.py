"""Fake of `torch_npu.contrib.transfer_to_npu`.

The real module rewrites "cuda" to "npu" in device arguments of torch, Tensor, Module and
torch.cuda APIs, and "nccl" to "hccl" in torch.distributed, as a side effect of being imported.
With no NPU there is nothing to map to, so this fake maps nothing; tests check that the ported
code imports it, and `IMPORTED` marks that it ran (as the real side effects would have).
"""

import os

if os.environ.get("FAKE_TORCH_NPU_BROKEN") == "transfer_to_npu":
    raise ModuleNotFoundError("No module named 'setuptools'")

IMPORTED = True
