"""The fake's fused kernels registered as torch operators, as torch_npu registers its own: torch.ops.npu.<name>,
with the derivative (op-plugin derivatives.yaml) registered for autograd. One registration per process."""

import torch

from torch_npu import ops

_LIBRARY = torch.library.Library("npu", "DEF")
_LIBRARY.define("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor")
_LIBRARY.impl("npu_rotary_mul", ops.npu_rotary_mul, "CompositeExplicitAutograd")  # any device, meta included


def _save(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3])


def _backward(ctx, grad):
    return (*ops.npu_rotary_mul_backward(grad, *ctx.saved_tensors), None)


torch.library.register_autograd("npu::npu_rotary_mul", _backward, setup_context=_save)
