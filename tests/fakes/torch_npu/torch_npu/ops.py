"""The fake torch_npu's fused kernels, in plain torch with the real ops' semantics; CALLS counts their calls."""

import torch

CALLS = {"npu_rotary_mul": 0}


def npu_rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> torch.Tensor:
    """The real op's "half" mode in plain torch: x * r1 + rotate_half(x) * r2, where rotate_half(x) is
    cat(-x2, x1) of the two halves of the last dim; r1/r2 broadcast against x, and the result has x's dtype."""
    if rotary_mode != "half":
        raise NotImplementedError(f"fake npu_rotary_mul: rotary_mode {rotary_mode!r}")
    CALLS["npu_rotary_mul"] += 1
    first, second = x.chunk(2, dim=-1)
    return (x * r1 + torch.cat([-second, first], dim=-1) * r2).to(x.dtype)
