"""The flow-matching action head on its own: masking and the training-time distribution."""

from __future__ import annotations

import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import FrameworkActionModelSection
from DiT4DiT.config.typed import section
from DiT4DiT.model.modules.action_model.flow_matching_head import build_action_head


def _tiny_head():
    cfg = load_config(
        None,
        [
            "framework.action_model.hidden_size=64",
            "framework.action_model.diffusion_model_cfg.output_dim=64",
            "framework.action_model.diffusion_model_cfg.num_layers=2",
            "framework.action_model.diffusion_model_cfg.num_attention_heads=2",
            "framework.action_model.diffusion_model_cfg.attention_head_dim=16",
            "framework.action_model.diffusion_model_cfg.dropout=0.0",
            "framework.action_model.diffusion_model_cfg.cross_attention_dim=24",
            "framework.cosmos25.vl_hidden_dim=24",
            "framework.action_model.action_dim=14", "datasets.vla_data.max_action_dim=14",
            "framework.action_model.state_dim=14", "datasets.vla_data.max_state_dim=14",
        ],
    )
    torch.manual_seed(0)
    return build_action_head(section(cfg.framework.action_model, FrameworkActionModelSection), feature_dim=24)


def test_loss_is_the_mean_squared_error_over_unmasked_entries():
    head = _tiny_head()
    features, state, actions = torch.randn(3, 10, 24), torch.randn(3, 1, 14), torch.randn(3, 8, 14)
    real = torch.zeros(3, 8, 14, dtype=torch.bool)
    real[..., :10] = True

    def loss(mask):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(7)  # same noise and flow time for every mask
            return float(head(features, actions, mask, state))

    everything, kept, padded = loss(torch.ones_like(real)), loss(real), loss(~real)
    # The mask only selects which squared errors are averaged: the parts add up to the whole.
    whole = everything * real.numel()
    assert abs(kept * real.sum() + padded * (~real).sum() - whole) < 1e-3 * whole
    assert kept != padded


def test_training_times_follow_beta_over_s():
    head = _tiny_head()
    torch.manual_seed(0)
    t = head.sample_time(200_000, torch.device("cpu"))
    assert 0.0 <= float(t.min()) and float(t.max()) <= 1.0 / 0.999 + 1e-6
    # Beta(1.5, 1) has mean 1.5 / 2.5 = 0.6 and density proportional to t^0.5 (more mass near noise).
    assert abs(float(t.mean()) - 0.6 / 0.999) < 0.005
    assert float((t > 0.5).float().mean()) > 0.6
