"""The flow-matching action head: a DiT over [state token, action tokens] that predicts the velocity
noise - action, trained with Beta-distributed times and sampled with Euler steps from t=1 (noise) to 0.

Real-time chunking (rtc.py): a request may carry the previous chunk's not-yet-executed actions. A head trained
with framework.action_model.rtc_training takes them as a clean prefix (flow time 0 on those tokens, P2); any
other head is guided towards them (P1's Algorithm 1). Without them sampling is unchanged.

The DiT (below the head) is GR00T-style: AdaLN blocks that alternate cross-attention to the backbone features
(even blocks) with self-attention over the action tokens (odd blocks).

Module and parameter names follow the original DiT4DiT head so that its checkpoints load strictly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from diffusers.models.attention import FeedForward
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from diffusers.utils.torch_utils import randn_tensor
from torch import nn

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import FrameworkActionModelRtcTrainingSection, FrameworkActionModelSection
from DiT4DiT.facts import DIT_SIZES
from DiT4DiT.model.modules.action_model.rtc import ChunkPrefix, guidance_weight, training_prefix
from DiT4DiT.model.modules.activation_checkpointing import run_block
from DiT4DiT.model.modules.host_to_device import to_device


def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


class SinusoidalPositionalEncoding(nn.Module):
    """(B, T) time buckets -> (B, T, dim) as [sin, cos] with frequencies exp(-ln(10000) * i / (dim/2))."""

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.embedding_dim = embedding_dim

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        half = self.embedding_dim // 2
        exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
        angles = timesteps.float().unsqueeze(-1) * exponent.exp()
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class MLP(nn.Module):
    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int):
        super().__init__()
        self.layer1 = nn.Linear(input_dim, hidden_dim)
        self.layer2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(torch.relu(self.layer1(x)))


class ActionEncoder(nn.Module):
    """Noisy actions (B, T, action_dim) and time buckets, (B,) or per token (B, T) -> action tokens (B, T, dim)."""

    def __init__(self, action_dim: int, embedding_dim: int):
        super().__init__()
        self.layer1 = nn.Linear(action_dim, embedding_dim)
        self.layer2 = nn.Linear(2 * embedding_dim, embedding_dim)
        self.layer3 = nn.Linear(embedding_dim, embedding_dim)
        self.pos_encoding = SinusoidalPositionalEncoding(embedding_dim)

    def forward(self, actions: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = actions.shape
        action_embedding = self.layer1(actions)
        if timesteps.ndim == 1:
            timesteps = timesteps[:, None].expand(batch, steps)
        time_embedding = self.pos_encoding(timesteps).to(action_embedding.dtype)
        hidden = swish(self.layer2(torch.cat([action_embedding, time_embedding], dim=-1)))
        return self.layer3(hidden)


class FlowmatchingActionHead(nn.Module):
    def __init__(
        self,
        *,
        action_dim: int,
        state_dim: int,
        hidden_size: int,
        chunk_len: int,
        add_pos_embed: bool,
        max_seq_len: int,
        noise_beta_alpha: float,
        noise_beta_beta: float,
        noise_s: float,
        num_timestep_buckets: int,
        num_inference_timesteps: int,
        dit: DiT,
        rtc_training: FrameworkActionModelRtcTrainingSection | None = None,
    ):
        super().__init__()
        self.action_dim = action_dim
        self.chunk_len = chunk_len
        self.add_pos_embed = add_pos_embed
        self.noise_s = noise_s
        self.num_timestep_buckets = num_timestep_buckets
        self.num_inference_timesteps = num_inference_timesteps
        self.beta_alpha = noise_beta_alpha
        self.beta_beta = noise_beta_beta
        # Training-time RTC (None: off, the original's training): it also makes served prefixes exact.
        self.rtc_training = rtc_training if rtc_training is not None and rtc_training.enabled else None
        embedding_dim = dit.inner_dim

        self.model = dit
        self.state_encoder = MLP(state_dim, hidden_size, embedding_dim) if state_dim else None
        self.action_encoder = ActionEncoder(action_dim, embedding_dim)
        self.action_decoder = MLP(hidden_size, hidden_size, action_dim)
        if add_pos_embed:
            self.position_embedding = nn.Embedding(max_seq_len, embedding_dim)
            nn.init.normal_(self.position_embedding.weight, mean=0.0, std=0.02)

    @property
    def dtype(self) -> torch.dtype:
        return self.action_encoder.layer1.weight.dtype

    def sample_time(self, batch: int, device: torch.device) -> torch.Tensor:
        """(batch,) times Beta(alpha, beta) / noise_s; density grows toward t = 1 (pure noise)."""
        beta = torch.distributions.Beta(torch.tensor(self.beta_alpha), torch.tensor(self.beta_beta))
        # Sampled on the host (the CPU generator, as before; no Beta kernel is needed on the device), copied once.
        return to_device(beta.sample((batch,)) / self.noise_s, device)

    def _state_tokens(self, state: torch.Tensor | None) -> torch.Tensor | None:
        if self.state_encoder is None:
            return None
        if state is None:
            raise ConfigError(
                "the action head was built with a state encoder (framework.action_model.state_dim > 0) but the "
                "examples carry no 'state'; set framework.action_model.state_dim=0 or train on data with a state"
            )
        return self.state_encoder(state)

    def _velocity(self, noisy_actions, buckets, vl_embs, state_tokens, token_buckets=None) -> torch.Tensor:
        """`buckets` (B,) condition the DiT's AdaLN; `token_buckets` (B, T), when given, are the action tokens' own
        times (training-time RTC gives its clean prefix time 0 there, as FluxVLA does for GR00T's head: the
        per-sample time keeps modulating every block, so a checkpoint's weights mean what they meant)."""
        tokens = self.action_encoder(noisy_actions, buckets if token_buckets is None else token_buckets)
        if self.add_pos_embed:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            tokens = tokens + self.position_embedding(positions).unsqueeze(0)
        if state_tokens is not None:
            tokens = torch.cat([state_tokens, tokens], dim=1)
        output = self.model(tokens, encoder_hidden_states=vl_embs, timestep=buckets)
        return self.action_decoder(output)[:, -noisy_actions.shape[1] :]

    def forward(self, vl_embs, actions, action_mask, state=None) -> torch.Tensor:
        """Masked MSE of the predicted velocity. vl_embs (B, S, F), actions/action_mask (B, T, D), state (B, 1, Ds).

        With training-time RTC each example's first d actions (d drawn per example) are given clean, at flow time 0,
        and left out of the loss (P2)."""
        t = self.sample_time(actions.shape[0], actions.device).to(actions.dtype)
        noise = torch.randn_like(actions)
        token_t, token_buckets = t[:, None, None], None
        if self.rtc_training is not None:
            prefix = training_prefix(actions.shape[0], actions.shape[1], self.rtc_training, actions.device)
            token_t = torch.where(prefix, 0.0, t[:, None]).unsqueeze(-1)
            token_buckets = (token_t[..., 0] * self.num_timestep_buckets).long()
            action_mask = action_mask & ~prefix[..., None]
        noisy_actions = (1 - token_t) * actions + token_t * noise
        buckets = (t * self.num_timestep_buckets).long()
        predicted = self._velocity(noisy_actions, buckets, vl_embs, self._state_tokens(state), token_buckets)
        mask = action_mask.to(predicted.dtype)
        # clamp: a batch whose every action dim is padding contributes 0 instead of NaN
        return ((predicted - (noise - actions)) ** 2 * mask).sum() / mask.sum().clamp_min(1.0)

    @torch.no_grad()
    def predict_action(self, vl_embs: torch.Tensor, state: torch.Tensor | None = None,
                       generators: list[torch.Generator] | None = None,
                       prefix: ChunkPrefix | None = None) -> torch.Tensor:
        """Euler integration from noise (t=1) to actions (t=0): (B, chunk_len, action_dim). `generators` (CPU, one
        per example) draw each example's starting noise on its own; None: torch's default generator. `prefix`
        (rtc.py): the previous chunk's rows for the examples that sent them; None samples as the original does."""
        batch = vl_embs.shape[0]
        actions = randn_tensor((batch, self.chunk_len, self.action_dim), generator=generators, device=vl_embs.device,
                               dtype=vl_embs.dtype)
        # As the original: predicting without a state denoises the action tokens alone (no state token).
        state_tokens = None if state is None else self._state_tokens(state)
        dt = 1.0 / self.num_inference_timesteps
        for step in range(self.num_inference_timesteps):
            t = 1.0 - step / self.num_inference_timesteps
            buckets = torch.full((batch,), int(t * self.num_timestep_buckets), device=vl_embs.device, dtype=torch.long)
            if prefix is None:
                velocity = self._velocity(actions, buckets, vl_embs, state_tokens)
            elif self.rtc_training is not None:
                actions = torch.where(prefix.frozen[..., None], prefix.actions, actions)
                token_buckets = buckets[:, None].masked_fill(prefix.frozen, 0)
                velocity = self._velocity(actions, buckets, vl_embs, state_tokens, token_buckets)
            else:
                velocity = self._guided_velocity(actions, t, buckets, vl_embs, state_tokens, prefix)
            actions = actions - dt * velocity
        if prefix is not None and self.rtc_training is not None:
            actions = torch.where(prefix.frozen[..., None], prefix.actions, actions)
        return actions

    def _guided_velocity(self, actions, t: float, buckets, vl_embs, state_tokens, prefix: ChunkPrefix) -> torch.Tensor:
        """P1 Algorithm 1's guided velocity (its Eqs. 2-5), in our time (t = 1 - tau, v = -v_tau):
        A = x - t v is the denoised estimate (P1: x + (1 - tau) v_tau), e = (Y - A) * W the prefix error under
        the soft mask, g = e^T dA/dx its vector-Jacobian product, and v' = v - w(t) g (P1 adds w g to v_tau).

        The full VJP: one backward through the head per Euler step, with respect to the noisy actions only. The
        identity-Jacobian shortcut (g = e; lerobot's code computes v before x requires grad, and so returns e)
        ignores how the DiT's self-attention couples the rows: its correction lands only on the rows the mask
        weights, and the rows after the overlap, the ones that execute, hear of it only through the next step's
        attention (of the last step's correction, not at all). The head is a small part of a request (the Cosmos
        feature pass dominates; bench/bench_latency.py measures what guidance adds), so we pay for the exact product.
        Rows of examples without a prefix have zero weights, so their g is exactly zero and v' = v.
        """
        with torch.enable_grad():
            noisy = actions.detach().requires_grad_(True)
            velocity = self._velocity(noisy, buckets, vl_embs, state_tokens)
            denoised = noisy - t * velocity
            error = (prefix.actions - denoised.detach()) * prefix.weights[..., None]
            (correction,) = torch.autograd.grad(denoised, noisy, grad_outputs=error)
        return velocity.detach() - guidance_weight(t) * correction


def build_action_head(action_cfg: FrameworkActionModelSection, feature_dim: int,
                      gradient_checkpointing: bool = False) -> FlowmatchingActionHead:
    """The head described by `framework.action_model` (checked when the config loaded), attending to features
    `feature_dim` wide; `gradient_checkpointing` recomputes its DiT blocks in the backward pass."""
    dit_cfg = action_cfg.diffusion_model_cfg
    heads, head_dim = DIT_SIZES[action_cfg.action_model_type]
    if dit_cfg.num_attention_heads is not None and dit_cfg.attention_head_dim is not None:  # both or neither
        heads, head_dim = dit_cfg.num_attention_heads, dit_cfg.attention_head_dim
    dit = DiT(
        num_attention_heads=heads,
        attention_head_dim=head_dim,
        output_dim=dit_cfg.output_dim,
        num_layers=dit_cfg.num_layers,
        cross_attention_dim=feature_dim,
        dropout=dit_cfg.dropout,
        final_dropout=dit_cfg.final_dropout,
        interleave_self_attention=dit_cfg.interleave_self_attention,
        gradient_checkpointing=gradient_checkpointing,
    )
    return FlowmatchingActionHead(
        action_dim=action_cfg.action_dim,
        state_dim=action_cfg.state_dim,
        hidden_size=action_cfg.hidden_size,
        chunk_len=action_cfg.chunk_length,
        add_pos_embed=action_cfg.add_pos_embed,
        max_seq_len=action_cfg.max_seq_len,
        noise_beta_alpha=action_cfg.noise_beta_alpha,
        noise_beta_beta=action_cfg.noise_beta_beta,
        noise_s=action_cfg.noise_s,
        num_timestep_buckets=action_cfg.num_timestep_buckets,
        num_inference_timesteps=action_cfg.num_inference_timesteps,
        dit=dit,
        rtc_training=action_cfg.rtc_training,
    )


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
        gradient_checkpointing: bool = False,
    ):
        super().__init__()
        self.inner_dim = num_attention_heads * attention_head_dim
        self.interleave_self_attention = interleave_self_attention
        # trainer.enable_gradient_checkpointing: each block is recomputed in the backward pass.
        self.gradient_checkpointing = gradient_checkpointing
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
