"""The GR00T-style diffusion transformer of the action head: AdaLN blocks that alternate cross-attention to
the backbone features (even blocks) with self-attention over the action tokens (odd blocks).

Module and parameter names follow the original DiT4DiT head so that its checkpoints load strictly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from diffusers.models.attention import FeedForward
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from torch import nn

from DiT4DiT.model.modules.activation_checkpointing import run_block


class TimestepEncoder(nn.Module):
    """Integer flow-matching time bucket -> (B, dim) embedding (256 sinusoidal channels, cos first)."""

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.time_proj = Timesteps(num_channels=256, flip_sin_to_cos=True, downscale_freq_shift=1)
        self.timestep_embedder = TimestepEmbedding(in_channels=256, time_embed_dim=embedding_dim)

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        projected = self.time_proj(timesteps).to(self.timestep_embedder.linear_1.weight.dtype)
        return self.timestep_embedder(projected)


class AdaLayerNorm(nn.Module):
    """LayerNorm without affine, then x * (1 + scale) + shift with (scale, shift) from the time embedding."""

    def __init__(self, dim: int, eps: float, elementwise_affine: bool):
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, eps=eps, elementwise_affine=elementwise_affine)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(self.silu(temb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class BasicTransformerBlock(nn.Module):
    """AdaLN -> attention (cross or self) -> residual; LayerNorm -> feed-forward -> residual."""

    def __init__(
        self,
        dim: int,
        num_attention_heads: int,
        attention_head_dim: int,
        dropout: float,
        cross_attention_dim: int | None,
        activation_fn: str,
        attention_bias: bool,
        upcast_attention: bool,
        norm_elementwise_affine: bool,
        norm_eps: float,
        final_dropout: bool,
    ):
        super().__init__()
        self.norm1 = AdaLayerNorm(dim, eps=norm_eps, elementwise_affine=norm_elementwise_affine)
        self.attn1 = Attention(
            query_dim=dim,
            heads=num_attention_heads,
            dim_head=attention_head_dim,
            dropout=dropout,
            bias=attention_bias,
            cross_attention_dim=cross_attention_dim,
            upcast_attention=upcast_attention,
            out_bias=True,
        )
        self.final_dropout = nn.Dropout(dropout) if final_dropout else None
        self.norm3 = nn.LayerNorm(dim, eps=norm_eps, elementwise_affine=norm_elementwise_affine)
        self.ff = FeedForward(dim, dropout=dropout, activation_fn=activation_fn, final_dropout=final_dropout, bias=True)

    def forward(self, hidden_states: torch.Tensor, temb: torch.Tensor, encoder_hidden_states: torch.Tensor | None):
        attn_output = self.attn1(self.norm1(hidden_states, temb), encoder_hidden_states=encoder_hidden_states)
        if self.final_dropout is not None:
            attn_output = self.final_dropout(attn_output)
        hidden_states = hidden_states + attn_output
        return hidden_states + self.ff(self.norm3(hidden_states))


class DiT(nn.Module):
    """Tokens (B, T, inner_dim) attending to features (B, S, cross_attention_dim) -> (B, T, output_dim)."""

    def __init__(
        self,
        num_attention_heads: int,
        attention_head_dim: int,
        output_dim: int,
        num_layers: int,
        cross_attention_dim: int,
        dropout: float = 0.0,
        final_dropout: bool = True,
        interleave_self_attention: bool = True,
        attention_bias: bool = True,
        activation_fn: str = "gelu-approximate",
        upcast_attention: bool = False,
        norm_elementwise_affine: bool = False,
        norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.inner_dim = num_attention_heads * attention_head_dim
        self.interleave_self_attention = interleave_self_attention
        # trainer.enable_gradient_checkpointing: each block is recomputed in the backward pass.
        self.gradient_checkpointing = False
        self.timestep_encoder = TimestepEncoder(self.inner_dim)
        self.transformer_blocks = nn.ModuleList(
            BasicTransformerBlock(
                self.inner_dim,
                num_attention_heads,
                attention_head_dim,
                dropout=dropout,
                cross_attention_dim=None if self._is_self_attention(index) else cross_attention_dim,
                activation_fn=activation_fn,
                attention_bias=attention_bias,
                upcast_attention=upcast_attention,
                norm_elementwise_affine=norm_elementwise_affine,
                norm_eps=norm_eps,
                final_dropout=final_dropout,
            )
            for index in range(num_layers)
        )
        self.norm_out = nn.LayerNorm(self.inner_dim, elementwise_affine=False, eps=1e-6)
        self.proj_out_1 = nn.Linear(self.inner_dim, 2 * self.inner_dim)
        self.proj_out_2 = nn.Linear(self.inner_dim, output_dim)

    def _is_self_attention(self, index: int) -> bool:
        return self.interleave_self_attention and index % 2 == 1

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, timestep: torch.Tensor):
        temb = self.timestep_encoder(timestep)
        for index, block in enumerate(self.transformer_blocks):
            context = None if self._is_self_attention(index) else encoder_hidden_states
            hidden_states = run_block(block, self.gradient_checkpointing, hidden_states, temb, context)
        # Note the (shift, scale) order here, the opposite of the blocks' (scale, shift).
        shift, scale = self.proj_out_1(F.silu(temb)).chunk(2, dim=1)
        hidden_states = self.norm_out(hidden_states) * (1 + scale[:, None]) + shift[:, None]
        return self.proj_out_2(hidden_states)
