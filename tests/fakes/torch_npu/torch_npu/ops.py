"""The fake torch_npu's fused kernels, in plain torch with the real ops' semantics; CALLS counts their calls."""

import torch

CALLS = {"npu_rotary_mul": 0, "npu_rotary_mul_backward": 0}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def npu_rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> torch.Tensor:
    """The real op's "half" mode in plain torch: x * r1 + rotate_half(x) * r2, where rotate_half(x) is
    cat(-x2, x1) of the two halves of the last dim; r1/r2 broadcast against x, and the result has x's dtype."""
    if rotary_mode != "half":
        raise NotImplementedError(f"fake npu_rotary_mul: rotary_mode {rotary_mode!r}")
    CALLS["npu_rotary_mul"] += 1
    return (x * r1 + _rotate_half(x) * r2).to(x.dtype)


def npu_rotary_mul_backward(grad: torch.Tensor, x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor):
    """Gradients of x, r1 and r2 (the real op's backward returns all three; op-plugin derivatives.yaml)."""
    CALLS["npu_rotary_mul_backward"] += 1
    scaled = grad * r2
    first, second = scaled.chunk(2, dim=-1)  # rotate_half transposed: cat(s2, -s1)
    grad_x = grad * r1 + torch.cat([second, -first], dim=-1)
    return (grad_x.to(x.dtype), (grad * x).sum_to_size(r1.shape).to(r1.dtype),
            (grad * _rotate_half(x)).sum_to_size(r2.shape).to(r2.dtype))
