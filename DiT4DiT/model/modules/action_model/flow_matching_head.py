"""The flow-matching action head: a DiT over [state token, action tokens] that predicts the velocity
noise - action, trained with Beta-distributed times and sampled with Euler steps from t=1 (noise) to 0.

Module and parameter names follow the original DiT4DiT head so that its checkpoints load strictly.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.model.modules.action_model.cross_attention_dit import DiT

# action_model_type -> (attention heads, head width); the DiT is heads * head width wide.
DIT_SIZES = {"DiT-B": (12, 64), "DiT-L": (32, 48)}


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
    """Noisy actions (B, T, action_dim) and time buckets (B,) -> action tokens (B, T, dim)."""

    def __init__(self, action_dim: int, embedding_dim: int):
        super().__init__()
        self.layer1 = nn.Linear(action_dim, embedding_dim)
        self.layer2 = nn.Linear(2 * embedding_dim, embedding_dim)
        self.layer3 = nn.Linear(embedding_dim, embedding_dim)
        self.pos_encoding = SinusoidalPositionalEncoding(embedding_dim)

    def forward(self, actions: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = actions.shape
        action_embedding = self.layer1(actions)
        time_embedding = self.pos_encoding(timesteps[:, None].expand(batch, steps)).to(action_embedding.dtype)
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
        return (beta.sample((batch,)) / self.noise_s).to(device)

    def _state_tokens(self, state: torch.Tensor | None) -> torch.Tensor | None:
        if self.state_encoder is None:
            return None
        if state is None:
            raise ValueError(
                "the action head was built with a state encoder (framework.action_model.state_dim > 0); pass 'state'"
            )
        return self.state_encoder(state)

    def _velocity(self, noisy_actions, buckets, vl_embs, state_tokens) -> torch.Tensor:
        tokens = self.action_encoder(noisy_actions, buckets)
        if self.add_pos_embed:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            tokens = tokens + self.position_embedding(positions).unsqueeze(0)
        if state_tokens is not None:
            tokens = torch.cat([state_tokens, tokens], dim=1)
        output = self.model(tokens, encoder_hidden_states=vl_embs, timestep=buckets)
        return self.action_decoder(output)[:, -noisy_actions.shape[1] :]

    def forward(self, vl_embs, actions, action_mask, state=None) -> torch.Tensor:
        """Masked MSE of the predicted velocity. vl_embs (B, S, F), actions/action_mask (B, T, D), state (B, 1, Ds)."""
        t = self.sample_time(actions.shape[0], actions.device).to(actions.dtype)
        noise = torch.randn_like(actions)
        t_ = t[:, None, None]
        noisy_actions = (1 - t_) * actions + t_ * noise
        buckets = (t * self.num_timestep_buckets).long()
        predicted = self._velocity(noisy_actions, buckets, vl_embs, self._state_tokens(state))
        mask = action_mask.to(predicted.dtype)
        # clamp: a batch whose every action dim is padding contributes 0 instead of NaN
        return ((predicted - (noise - actions)) ** 2 * mask).sum() / mask.sum().clamp_min(1.0)

    @torch.no_grad()
    def predict_action(self, vl_embs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """Euler integration from noise (t=1) to actions (t=0): (B, chunk_len, action_dim)."""
        batch = vl_embs.shape[0]
        actions = torch.randn(batch, self.chunk_len, self.action_dim, device=vl_embs.device, dtype=vl_embs.dtype)
        # As the original: predicting without a state denoises the action tokens alone (no state token).
        state_tokens = None if state is None else self._state_tokens(state)
        dt = 1.0 / self.num_inference_timesteps
        for step in range(self.num_inference_timesteps):
            t = 1.0 - step / self.num_inference_timesteps
            buckets = torch.full((batch,), int(t * self.num_timestep_buckets), device=vl_embs.device, dtype=torch.long)
            actions = actions - dt * self._velocity(actions, buckets, vl_embs, state_tokens)
        return actions


def build_action_head(action_cfg, feature_dim: int) -> FlowmatchingActionHead:
    """The head described by `framework.action_model`, attending to features `feature_dim` wide."""
    dit_cfg = action_cfg.diffusion_model_cfg
    heads, head_dim = dit_cfg.num_attention_heads, dit_cfg.attention_head_dim
    if (heads is None) != (head_dim is None):
        raise ConfigError(
            "framework.action_model.diffusion_model_cfg.num_attention_heads and attention_head_dim override the size "
            "table together: set both or neither"
        )
    if heads is None:
        if action_cfg.action_model_type not in DIT_SIZES:
            raise ConfigError(
                f"framework.action_model.action_model_type={action_cfg.action_model_type!r}; use one of "
                f"{', '.join(DIT_SIZES)} (or set diffusion_model_cfg.num_attention_heads and attention_head_dim)"
            )
        heads, head_dim = DIT_SIZES[action_cfg.action_model_type]
    chunk_len = int(action_cfg.future_action_window_size) + 1
    checks = [
        (
            int(dit_cfg.cross_attention_dim) == feature_dim,
            f"framework.action_model.diffusion_model_cfg.cross_attention_dim={dit_cfg.cross_attention_dim} must equal "
            f"the backbone feature width {feature_dim} (framework.cosmos25.vl_hidden_dim)",
        ),
        (
            int(dit_cfg.output_dim) == int(action_cfg.hidden_size),
            f"framework.action_model.diffusion_model_cfg.output_dim={dit_cfg.output_dim} must equal "
            f"framework.action_model.hidden_size={action_cfg.hidden_size} (the action decoder reads the DiT output)",
        ),
        (
            int(action_cfg.action_horizon) == chunk_len,
            f"framework.action_model.action_horizon={action_cfg.action_horizon} must equal "
            f"future_action_window_size + 1 = {chunk_len}",
        ),
        (
            int(action_cfg.past_action_window_size) == 0,
            f"framework.action_model.past_action_window_size={action_cfg.past_action_window_size}: only 0 is supported",
        ),
        (
            dit_cfg.norm_type == "ada_norm",
            f"framework.action_model.diffusion_model_cfg.norm_type={dit_cfg.norm_type!r}: only ada_norm is supported",
        ),
        (
            dit_cfg.positional_embeddings is None,
            "framework.action_model.diffusion_model_cfg.positional_embeddings: only null is supported",
        ),
        (
            chunk_len <= int(action_cfg.max_seq_len) or not action_cfg.add_pos_embed,
            f"framework.action_model.max_seq_len={action_cfg.max_seq_len} is shorter than the action chunk "
            f"({chunk_len})",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    dit = DiT(
        num_attention_heads=int(heads),
        attention_head_dim=int(head_dim),
        output_dim=int(dit_cfg.output_dim),
        num_layers=int(dit_cfg.num_layers),
        cross_attention_dim=feature_dim,
        dropout=float(dit_cfg.dropout),
        final_dropout=bool(dit_cfg.final_dropout),
        interleave_self_attention=bool(dit_cfg.interleave_self_attention),
    )
    return FlowmatchingActionHead(
        action_dim=int(action_cfg.action_dim),
        state_dim=int(action_cfg.state_dim or 0),
        hidden_size=int(action_cfg.hidden_size),
        chunk_len=chunk_len,
        add_pos_embed=bool(action_cfg.add_pos_embed),
        max_seq_len=int(action_cfg.max_seq_len),
        noise_beta_alpha=float(action_cfg.noise_beta_alpha),
        noise_beta_beta=float(action_cfg.noise_beta_beta),
        noise_s=float(action_cfg.noise_s),
        num_timestep_buckets=int(action_cfg.num_timestep_buckets),
        num_inference_timesteps=int(action_cfg.num_inference_timesteps),
        dit=dit,
    )
