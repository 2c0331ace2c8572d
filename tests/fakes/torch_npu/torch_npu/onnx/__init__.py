"""Fake of `torch_npu.onnx`: importing the real one replaces `torch_npu.npu_rotary_mul` (and other fused ops) with
an autograd.Function that has an ONNX `symbolic` and a forward only, so a backward through the attribute fails.
`torch.ops.npu.npu_rotary_mul` stays the operator with its derivative."""

import torch

import torch_npu


class _NPURotaryMulOP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, r1, r2, rotary_mode="half"):
        return torch.ops.npu.npu_rotary_mul(x, r1, r2, rotary_mode)

    @staticmethod
    def symbolic(g, x, r1, r2, rotary_mode="half"):
        return g.op("npu::NPURotaryMul", x, r1, r2, rotary_mode_s=rotary_mode)


torch_npu.npu_rotary_mul = _NPURotaryMulOP.apply
