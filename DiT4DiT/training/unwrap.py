"""The model inside accelerate's wrapper, and its whole state dict, without importing DeepSpeed where no run uses it.

accelerate's `unwrap_model` and `get_state_dict` import deepspeed whenever it is installed, to recognise its
engine: about 9 s of CPU, more than all the trainer's other imports, in every process of a DDP or single-process
run. Those runs wrap the model in DDP at most; every other kind (DeepSpeed, which has imported deepspeed already)
goes through accelerate.
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

_WRAPPERS = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
_DDP_KINDS = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU, DistributedType.MULTI_NPU)


def unwrap(accelerator: Accelerator, model: torch.nn.Module) -> torch.nn.Module:
    if accelerator.distributed_type not in _DDP_KINDS:
        return accelerator.unwrap_model(model)
    while isinstance(model, _WRAPPERS):
        model = model.module
    return model


def full_state_dict(accelerator: Accelerator, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Collective under DeepSpeed (ZeRO-3 gathers the shards on every rank); the bare model's state dict otherwise."""
    if accelerator.distributed_type not in _DDP_KINDS:
        state: dict[str, torch.Tensor] = accelerator.get_state_dict(model)
        return state
    bare: dict[str, torch.Tensor] = unwrap(accelerator, model).state_dict()
    return bare
