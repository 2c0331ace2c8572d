"""The flow-matching action head on its own: masking, the training-time distribution, and real-time chunking
(inference-time guidance, exact prefixes, training-time RTC)."""

from __future__ import annotations

import numpy as np
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import FrameworkActionModelRtcTrainingSection, FrameworkActionModelSection
from DiT4DiT.config.typed import section
from DiT4DiT.model.modules.action_model.flow_matching_head import build_action_head
from DiT4DiT.model.modules.action_model.rtc import ChunkPrefix, guidance_weight, soft_mask, training_prefix


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


# --- real-time chunking (rtc.py) -----------------------------------------------------------------------------

def _rtc_head(*overrides: str):
    """The tiny head, at eval (no dropout), with extra config overrides (training-time RTC)."""
    cfg = load_config(None, [
        "framework.action_model.hidden_size=64", "framework.action_model.diffusion_model_cfg.output_dim=64",
        "framework.action_model.diffusion_model_cfg.num_layers=2",
        "framework.action_model.diffusion_model_cfg.num_attention_heads=2",
        "framework.action_model.diffusion_model_cfg.attention_head_dim=16",
        "framework.action_model.diffusion_model_cfg.cross_attention_dim=24", "framework.cosmos25.vl_hidden_dim=24",
        "framework.action_model.action_dim=14", "datasets.vla_data.max_action_dim=14",
        "framework.action_model.state_dim=14", "datasets.vla_data.max_state_dim=14", *overrides])
    torch.manual_seed(0)
    head = build_action_head(section(cfg.framework.action_model, FrameworkActionModelSection), feature_dim=24)
    return head.eval()


def _prefix(head, examples):
    return ChunkPrefix.of(examples, head.chunk_len, head.action_dim, torch.device("cpu"), torch.float32)


def _sample(head, features, state, seeds, prefix=None):
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    return head.predict_action(features, state, generators, prefix)


def test_sampling_without_a_prefix_is_the_plain_euler_integration_bit_for_bit():
    head = _rtc_head()
    features, state = torch.randn(2, 10, 24), torch.randn(2, 1, 14)
    # The sampler as the original defines it (x -= v / N from t = 1), written out here.
    x = torch.cat([torch.randn(1, 8, 14, generator=torch.Generator().manual_seed(s)) for s in (3, 4)])
    tokens = head._state_tokens(state)
    with torch.no_grad():
        for step in range(4):
            t = 1.0 - step / 4
            x = x - 0.25 * head._velocity(x, torch.full((2,), int(t * 1000)), features, tokens)
    assert torch.equal(_sample(head, features, state, (3, 4)), x)
    assert ChunkPrefix.of([{"lang": "a"}, {"lang": "b"}], 8, 14, torch.device("cpu"), torch.float32) is None


def test_the_soft_mask_and_guidance_weight_are_the_papers():
    # P1 Eq. 5 at H = 8, d = 2, end = 6: 1, 1, then c (e^c - 1) / (e - 1) with c = (6 - i) / 5, then 0.
    c = np.array([4, 3, 2, 1]) / 5
    expected = np.concatenate([[1, 1], c * np.expm1(c) / (np.e - 1), [0, 0]])
    np.testing.assert_allclose(soft_mask(8, 2, 6), expected)
    assert soft_mask(8, 3, 3).tolist() == [1, 1, 1, 0, 0, 0, 0, 0]  # the whole leftover frozen
    # P1 Eq. 4 in our time (tau = 1 - t): 2 at the middle, (tau^2 + (1-tau)^2) / (tau (1-tau)) elsewhere, clipped.
    assert guidance_weight(0.5) == 2.0
    assert abs(guidance_weight(0.75) - (0.25**2 + 0.75**2) / (0.25 * 0.75)) < 1e-12
    assert guidance_weight(1.0) == guidance_weight(0.0) == 5.0 and guidance_weight(0.99) == 5.0


def test_guidance_takes_the_full_vector_jacobian_product_through_the_head():
    head = _rtc_head()
    features, state = torch.randn(1, 10, 24), torch.randn(1, 1, 14)
    tokens, buckets, t = head._state_tokens(state), torch.full((1,), 500), 0.5
    x = torch.randn(1, 8, 14)
    prefix = _prefix(head, [{"prev_actions": np.random.default_rng(0).normal(size=(4, 14)), "inference_delay": 2}])
    guided = head._guided_velocity(x, t, buckets, features, tokens, prefix)

    def denoised(noisy):
        return noisy - t * head._velocity(noisy, buckets, features, tokens)

    plain = denoised(x).detach()
    error = (prefix.actions - plain) * prefix.weights[..., None]
    _, vjp = torch.autograd.functional.vjp(denoised, x, error)
    velocity = (x - plain) / t
    torch.testing.assert_close(guided, velocity - 2.0 * vjp, rtol=1e-5, atol=1e-6)
    # Not the identity shortcut (g = e): the rows the mask leaves out (4..7) are corrected too, through attention.
    correction = (velocity - guided) / 2.0
    assert float(correction[:, 4:].abs().max()) > 1e-4 and float(error[:, 4:].abs().max()) == 0.0


def test_a_guided_chunk_follows_the_previous_one_on_its_frozen_rows():
    head = _rtc_head()
    features, state = torch.randn(3, 10, 24), torch.randn(3, 1, 14)
    previous = _sample(head, features, state, (10, 11, 12))
    d = 3
    asked = [{"prev_actions": previous[i, 2:].numpy(), "inference_delay": d} for i in range(3)]  # 2 executed
    free = _sample(head, features, state, (20, 21, 22))
    guided = _sample(head, features, state, (20, 21, 22), _prefix(head, asked))
    target = previous[:, 2:2 + d]
    free_gap = float((free[:, :d] - target).abs().mean())
    guided_gap = float((guided[:, :d] - target).abs().mean())
    assert guided_gap < 0.1 * free_gap, (guided_gap, free_gap)  # the margin: a tenth (measured: 0.004)


def test_examples_with_and_without_a_prefix_share_one_batch():
    head = _rtc_head()
    features, state = torch.randn(2, 10, 24), torch.randn(2, 1, 14)
    plain = _sample(head, features, state, (5, 6))
    asked = [{"lang": "no prefix"}, {"prev_actions": np.ones((8, 14), np.float32), "inference_delay": 2,
                                     "execution_horizon": 6}]
    mixed = _sample(head, features, state, (5, 6), _prefix(head, asked))
    assert torch.equal(mixed[0], plain[0])  # the example without a prefix: its plain sampling, bit for bit
    assert not torch.equal(mixed[1], plain[1])


def test_a_head_trained_with_rtc_takes_the_prefix_exactly():
    head = _rtc_head("framework.action_model.rtc_training.enabled=true")
    features, state = torch.randn(2, 10, 24), torch.randn(2, 1, 14)
    previous = np.random.default_rng(1).normal(size=(5, 14)).astype(np.float32)
    asked = [{"prev_actions": previous, "inference_delay": 3}, {"lang": "none"}]
    out = _sample(head, features, state, (1, 2), _prefix(head, asked))
    assert torch.equal(out[0, :3], torch.from_numpy(previous[:3]))
    assert torch.equal(out[1], _sample(head, features, state, (1, 2))[1])


def test_per_token_times_equal_the_per_sample_time_broadcast():
    head = _rtc_head()
    actions = torch.randn(2, 8, 14)
    buckets = torch.tensor([100, 900])
    assert torch.equal(head.action_encoder(actions, buckets), head.action_encoder(actions, buckets[:, None].expand(2, 8)))


def test_training_time_rtc_gives_the_prefix_clean_and_leaves_it_out_of_the_loss():
    rtc = _rtc_head("framework.action_model.rtc_training.enabled=true", "framework.action_model.rtc_training.max_delay=3")
    features, state, actions = torch.randn(4, 10, 24), torch.randn(4, 1, 14), torch.randn(4, 8, 14)
    mask = torch.ones(4, 8, 14, dtype=torch.bool)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        loss = rtc(features, actions, mask, state)
    # The same draws by hand: time, noise, then the delays.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        t = rtc.sample_time(4, torch.device("cpu"))
        noise = torch.randn_like(actions)
        prefix = training_prefix(4, 8, rtc.rtc_training, torch.device("cpu"))
    token_t = torch.where(prefix, 0.0, t[:, None])[..., None]
    noisy = (1 - token_t) * actions + token_t * noise
    assert torch.equal(noisy[prefix], actions[prefix])  # the prefix enters clean
    with torch.no_grad():
        predicted = rtc._velocity(noisy, (t * 1000).long(), features, rtc._state_tokens(state),
                                  (token_t[..., 0] * 1000).long())
    kept = (~prefix)[..., None].expand_as(actions)
    expected = ((predicted - (noise - actions)) ** 2)[kept].mean()
    torch.testing.assert_close(loss.detach(), expected)


def test_training_delays_cover_zero_to_max_delay_in_the_chosen_distribution():
    section_of = FrameworkActionModelRtcTrainingSection
    torch.manual_seed(0)
    uniform = training_prefix(40_000, 8, section_of(enabled=True, max_delay=4), torch.device("cpu")).sum(1)
    counts = torch.bincount(uniform, minlength=8)
    assert counts[5:].sum() == 0 and (counts[:5] > 7_500).all()  # 0..4, about 8,000 each
    skewed = training_prefix(40_000, 8, section_of(enabled=True, max_delay=4, distribution="exponential",
                                                   temperature=1.0), torch.device("cpu")).sum(1)
    share = torch.bincount(skewed, minlength=5).double() / 40_000
    expected = torch.exp(-torch.arange(5.0)) / torch.exp(-torch.arange(5.0)).sum()  # P(d) ~ exp(-d / T)
    assert torch.allclose(share, expected.double(), atol=0.01)


def test_the_action_dit_is_built_with_its_checkpointing_flag():
    """The head's recompute flag is a constructor argument of the DiT (not set from outside after it is built)."""
    from DiT4DiT.model.modules.action_model.flow_matching_head import DiT

    cfg = load_config(None)
    for flag in (False, True):
        assert build_action_head(cfg.framework.action_model, feature_dim=24, gradient_checkpointing=flag).model.gradient_checkpointing is flag
        assert DiT(2, 4, 8, 1, 24, gradient_checkpointing=flag).gradient_checkpointing is flag
