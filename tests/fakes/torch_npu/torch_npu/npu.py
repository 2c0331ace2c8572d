"""The `torch.npu` device module of the fake torch_npu: what autocast and availability checks ask."""

import torch


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def get_amp_supported_dtype() -> list[torch.dtype]:
    # torch_npu 2.7.1 autocasts to fp16, bf16 and fp32.
    return [torch.float16, torch.bfloat16, torch.float32]


def is_bf16_supported() -> bool:
    return True
