"""The DiT4DiT framework in training: gradient routing, freezing, the three modes, prediction, learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.model.framework import FRAMEWORK_REGISTRY, build_framework
from DiT4DiT.model.freezing import freeze_modules

FROZEN = "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"


def _grad_total(module: torch.nn.Module) -> float:
    return sum(float(p.grad.abs().sum()) for p in module.parameters() if p.grad is not None)


def test_registry_and_top_level_modules(tiny_model_cfg):
    model = build_framework(tiny_model_cfg())
    assert "DiT4DiT" in FRAMEWORK_REGISTRY and type(model) is FRAMEWORK_REGISTRY["DiT4DiT"]
    assert [name for name, _ in model.named_children()] == ["backbone_interface", "action_model"]
    extractor = model.backbone_interface.extractor
    assert {"text_encoder", "vae", "transformer"} <= {name for name, _ in extractor.named_children()}


def test_action_loss_reaches_only_the_head_and_video_loss_only_the_transformer(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    transformer = model.backbone_interface.extractor.transformer
    losses = model(tiny_examples(cfg))

    losses["action_loss"].backward(retain_graph=True)
    assert _grad_total(model.action_model) > 0
    assert _grad_total(transformer) == 0  # features are detached, as in the original

    model.zero_grad(set_to_none=True)
    losses["future_video_loss"].backward()
    assert _grad_total(transformer) > 0
    assert _grad_total(model.action_model) == 0


def test_frozen_modules_get_no_gradient(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    assert freeze_modules(model, FROZEN) == FROZEN.split(",")
    extractor = model.backbone_interface.extractor
    losses = model(tiny_examples(cfg))
    (losses["action_loss"] + losses["future_video_loss"]).backward()
    for frozen in (extractor.text_encoder, extractor.vae):
        assert all(not p.requires_grad and p.grad is None for p in frozen.parameters())
    assert _grad_total(extractor.transformer) > 0


def test_unfrozen_vae_is_trained_by_the_video_loss(tiny_model_cfg, tiny_examples):
    """Without freezing, the conditioning latent carries the video loss into the VAE encoder (as upstream)."""
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    freeze_modules(model, "backbone_interface.extractor.text_encoder")
    model(tiny_examples(cfg))["future_video_loss"].backward()
    assert _grad_total(model.backbone_interface.extractor.vae.encoder) > 0


def test_freeze_unknown_path_names_it(tiny_model_cfg):
    model = build_framework(tiny_model_cfg())
    with pytest.raises(ConfigError, match=r"no module 'backbone_interface.extractor.text_encodr'.*action_model"):
        freeze_modules(model, "backbone_interface.extractor.text_encodr")
    assert freeze_modules(model, "") == []


@pytest.mark.parametrize(
    "mode, keys",
    [("joint", {"action_loss", "future_video_loss"}), ("action", {"action_loss"}), ("video", {"future_video_loss"})],
)
def test_training_modes(tiny_model_cfg, tiny_examples, mode, keys):
    cfg = tiny_model_cfg(f"framework.cosmos25.training={mode}")
    model = build_framework(cfg)
    assert (model.action_model is None) == (mode == "video")
    losses = model(tiny_examples(cfg))
    assert set(losses) == keys
    sum(losses.values()).backward()


def test_joint_mode_with_one_frame_has_no_video_loss(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("datasets.vla_data.video_delta_indices=[0]")
    model = build_framework(cfg)
    assert set(model(tiny_examples(cfg))) == {"action_loss"}


def test_predict_action_shape(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    examples = tiny_examples(cfg, batch=3, views=3)
    out = model.predict_action(examples, do_sample=False, use_ddim=True, num_ddim_steps=10)
    actions = out["normalized_actions"]
    assert isinstance(actions, np.ndarray) and actions.dtype == np.float32
    assert actions.shape == (3, 8, 14) and np.isfinite(actions).all()
    # A deployment request: a single example dict, one current frame, no future frames.
    single = {"image": [examples[0]["image"][0]], "lang": examples[0]["lang"], "state": examples[0]["state"]}
    assert model.predict_action(single)["normalized_actions"].shape == (1, 8, 14)


def test_euler_inference_steps_through_the_time_buckets(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("framework.action_model.num_inference_timesteps=4")
    model = build_framework(cfg)
    seen = []
    model.action_model.model.timestep_encoder.register_forward_hook(lambda m, args, out: seen.append(args[0].tolist()))
    model.predict_action(tiny_examples(cfg, batch=2))
    assert seen == [[1000, 1000], [750, 750], [500, 500], [250, 250]]


def test_wrong_action_chunk_is_rejected(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    examples = tiny_examples(cfg)
    for example in examples:
        example["action"] = example["action"][:5]
    with pytest.raises(ValueError, match="5 action steps but the model expects .*future_action_window_size \\+ 1 = 8"):
        model(examples)


def test_repeated_diffusion_steps_repeat_the_batch(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("trainer.repeated_diffusion_steps=3")
    model = build_framework(cfg)
    batches = []
    model.action_model.action_encoder.register_forward_hook(lambda m, args, out: batches.append(args[0].shape[0]))
    model(tiny_examples(cfg, batch=2))
    assert batches == [6]


@pytest.mark.slow
def test_two_hundred_steps_halve_the_action_loss(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("framework.cosmos25.training=action")
    torch.manual_seed(0)
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    examples = tiny_examples(cfg, batch=2)
    model.prepare_prompts([e["lang"] for e in examples])

    def evaluation_loss() -> float:
        # Same noise, flow times and backbone noise before and after training.
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(1234)
            return float(np.mean([model(examples)["action_loss"].item() for _ in range(8)]))

    before = evaluation_loss()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    for _ in range(200):
        optimizer.zero_grad()
        model(examples)["action_loss"].backward()
        optimizer.step()
    after = evaluation_loss()
    assert after <= 0.5 * before, (before, after)


def test_bf16_backbone_feeds_an_fp32_head_without_autocast(tiny_model_cfg, tiny_examples):
    """On a host where autocast("cuda") disables itself, explicit casts keep a bf16 backbone and fp32 head working."""
    cfg = tiny_model_cfg("framework.cosmos25.torch_dtype=bfloat16")
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    assert model.backbone_interface.extractor.transformer.dtype == torch.bfloat16
    assert model.action_model.dtype == torch.float32
    losses = model(tiny_examples(cfg))
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert model.predict_action(tiny_examples(cfg))["normalized_actions"].dtype == np.float32
