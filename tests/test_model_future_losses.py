"""The original's sampled future losses (latent_mse, pixel_l1, pixel_mse) next to flow matching, on the tiny model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules

FROZEN = "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"


def _model(tiny_model_cfg, loss_type: str, steps: int = 2):
    cfg = tiny_model_cfg(f"framework.cosmos25.future_loss_type={loss_type}", "framework.cosmos25.training=video",
                         f"framework.cosmos25.future_num_inference_steps={steps}")
    torch.manual_seed(0)
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    return cfg, model


@pytest.mark.parametrize("loss_type", ["latent_mse", "pixel_l1", "pixel_mse"])
def test_sampled_losses_train_the_transformer_through_every_sampler_step(tiny_model_cfg, tiny_examples, loss_type):
    cfg, model = _model(tiny_model_cfg, loss_type)
    extractor = model.backbone_interface.extractor
    calls = []
    extractor.transformer.register_forward_hook(lambda *args: calls.append(1))
    loss = model(tiny_examples(cfg))["future_video_loss"]
    assert len(calls) == 2 and torch.isfinite(loss) and float(loss) > 0  # 2 sampler steps, no feature pass
    loss.backward()
    first_block = extractor.transformer.transformer_blocks[0]
    assert sum(float(p.grad.abs().sum()) for p in first_block.parameters() if p.grad is not None) > 0
    if loss_type != "latent_mse":
        assert float(loss) <= 1.0  # frames in [0, 1]


def test_latent_mse_compares_the_sampled_future_latents_with_the_encoded_clip(tiny_model_cfg, tiny_examples):
    cfg, model = _model(tiny_model_cfg, "latent_mse", steps=3)
    extractor = model.backbone_interface.extractor
    examples = tiny_examples(cfg)
    sampled = []
    original = extractor.sample_future_latents
    extractor.sample_future_latents = lambda *args: sampled.append(original(*args)) or sampled[-1]
    loss = model(examples)["future_video_loss"]
    video = torch.stack([torch.stack(e["image"]) for e in examples]).transpose(1, 2) * 2 - 1  # (B, 3, T, H, W)
    with torch.no_grad():  # 5 frames: 2 latent frames, the second one supervised
        targets = extractor._normalise(extractor.vae.encode(video[:, :, :5]).latent_dist.mode())
    torch.testing.assert_close(loss, F.mse_loss(sampled[0][:, :, 1:2].float(), targets[:, :, 1:2]))


def test_pixel_mse_is_below_pixel_l1_for_the_same_sample(tiny_model_cfg, tiny_examples):
    """Same seed, same sampled frames; every pixel error lies in [0, 1], so its square is no larger."""
    values = {}
    for loss_type in ("pixel_l1", "pixel_mse"):
        cfg, model = _model(tiny_model_cfg, loss_type)
        torch.manual_seed(5)
        values[loss_type] = float(model(tiny_examples(cfg))["future_video_loss"])
    assert 0 < values["pixel_mse"] < values["pixel_l1"]


def test_unknown_future_loss_lists_all_seven(tiny_model_cfg):
    with pytest.raises(ConfigError, match="flow_matching, latent_flow_matching, rectified_flow, rf, pixel_l1, "
                                          "pixel_mse, latent_mse"):
        tiny_model_cfg("framework.cosmos25.future_loss_type=pixel_l2")
