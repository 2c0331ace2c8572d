"""Our attention processor for the diffusers 0.38 Cosmos transformer, set through diffusers' processor API.

It computes what diffusers' CosmosAttnProcessor2_0 computes, with two differences that matter on an NPU:
- diffusers repeats K and V along dim 3 by head_dim(q) // head_dim(k/v) (its GQA step); in Cosmos the heads match,
  so the repeat is a copy of K and V by 1. torch_npu requires repeat_interleave outputs under 2**22 elements and
  the robotwin shape makes 9.6 M: we skip it when the factor is 1 and keep diffusers' repeat otherwise.
- RoPE (rotate-half layout, diffusers' use_real_unbind_dim=-2) runs as the operator torch.ops.npu.npu_rotary_mul
  on NPU tensors where torch_npu is loaded: one fused kernel instead of several float32 element-wise ones.
  Elsewhere it is diffusers' apply_rotary_emb. Both compute in float32, as diffusers does. The operator, not the
  attribute torch_npu.npu_rotary_mul: importing torch_npu.onnx replaces that attribute with an autograd.Function
  that has no backward; the operator carries its derivative (op-plugin derivatives.yaml).
"""

from __future__ import annotations

import sys
from typing import Callable

import torch
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import apply_rotary_emb
from diffusers.models.transformers.transformer_cosmos import CosmosAttnProcessor2_0


def _repeat_kv(kv: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """diffusers' K/V repeat, skipped when it would repeat by 1 (a copy that changes nothing)."""
    factor = query.size(3) // kv.size(3)
    return kv if factor == 1 else kv.repeat_interleave(factor, dim=3)


class CosmosAttnProcessor:
    """CosmosAttnProcessor2_0's math without the no-op K/V repeat, with fused RoPE when `rotary_mul` is given."""

    def __init__(self, rotary_mul: Callable | None = None):
        self.rotary_mul = rotary_mul  # torch.ops.npu.npu_rotary_mul(x, cos, sin): x*cos + rotate_half(x)*sin

    def _rope(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if self.rotary_mul is None or x.device.type == "cpu":  # torch_npu's kernels run on NPU tensors only
            return apply_rotary_emb(x, cos_sin, use_real=True, use_real_unbind_dim=-2)
        cos, sin = (t[None, None].to(x.device) for t in cos_sin)  # (S, D) -> (1, 1, S, D), as diffusers broadcasts
        return self.rotary_mul(x.float(), cos, sin).to(x.dtype)

    def __call__(
        self,
        attn: Attention,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        # (B, S, heads * head_dim) -> (B, heads, S, head_dim)
        query = attn.to_q(hidden_states).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        key = attn.to_k(context).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        value = attn.to_v(context).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        query, key = attn.norm_q(query), attn.norm_k(key)
        if image_rotary_emb is not None:
            query, key = self._rope(query, image_rotary_emb), self._rope(key, image_rotary_emb)
        key, value = _repeat_kv(key, query), _repeat_kv(value, query)
        out = dispatch_attention_fn(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                    attn_mask=attention_mask, dropout_p=0.0, is_causal=False)
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def fused_rotary_mul() -> Callable | None:
    """torch_npu's fused RoPE as the operator with its derivative, or None where torch_npu is not loaded (the NPU
    patch or serving's device seam loads it, never this module)."""
    if "torch_npu" not in sys.modules:
        return None
    return getattr(torch.ops.npu, "npu_rotary_mul", None)


def use_our_attention(transformer: torch.nn.Module) -> int:
    """Give every attention module of `transformer` that runs diffusers' CosmosAttnProcessor2_0 our processor
    (Attention.set_processor); the image-context CosmosAttention keeps its own. Returns how many were replaced."""
    processor = CosmosAttnProcessor(fused_rotary_mul())
    replaced = 0
    for module in transformer.modules():
        if isinstance(module, Attention) and isinstance(module.processor, CosmosAttnProcessor2_0):
            module.set_processor(processor)
            replaced += 1
    return replaced
