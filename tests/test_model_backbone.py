"""The Cosmos backbone on the tiny pipeline: feature shapes, the hook, prompt embeddings and their cache."""

from __future__ import annotations

import pytest
import torch

from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules
from DiT4DiT.model.modules.cosmos_backbone import latent_frame_count, wasted_frames_message
from DiT4DiT.model.modules.cosmos_pipeline import NoOpSafetyChecker
from DiT4DiT.model.modules.prompt_cache import encode_prompts

FROZEN = "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"


@pytest.mark.parametrize("views", [1, 3])
def test_feature_and_loss_shapes(tiny_model_cfg, tiny_examples, views):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    examples = tiny_examples(cfg, batch=2, views=views)
    images = [e["image"] for e in examples]
    out = model.backbone_interface(images, [e["lang"] for e in examples], want_features=True, want_video_loss=True)
    # 5 frames -> 2 latent frames; 32 x (32*views) pixels -> 2 x (2*views) tokens after VAE /8 and patch /2.
    assert out.features.shape == (2, 2 * 2 * 2 * views, 32)
    assert not out.features.requires_grad
    assert out.future_video_loss.shape == ()

    losses = model(examples)
    assert set(losses) == {"action_loss", "future_video_loss"}
    for value in losses.values():
        assert value.shape == () and torch.isfinite(value)
        assert value.requires_grad


def test_feature_sigma_is_one_step_cosmos_schedule(tiny_model_cfg):
    model = build_framework(tiny_model_cfg())
    assert model.backbone_interface.extractor.feature_sigma == pytest.approx(200.0 / 201.0, abs=1e-4)


def test_hook_keeps_feature_pass_output(tiny_model_cfg, tiny_examples):
    """The second (video-loss) transformer call must not overwrite the captured features."""
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    extractor = model.backbone_interface.extractor
    seen = []
    extractor.transformer.transformer_blocks[cfg.framework.cosmos25.extract_layer].register_forward_hook(
        lambda module, args, output: seen.append(output.detach().clone())
    )
    examples = tiny_examples(cfg)
    out = model.backbone_interface([e["image"] for e in examples], [e["lang"] for e in examples], True, True)
    assert len(seen) == 2
    torch.testing.assert_close(out.features, seen[0])
    assert not torch.allclose(out.features, seen[1])


def test_prompt_embeddings_match_the_diffusers_pipeline(tiny_pipeline_dir):
    from diffusers import Cosmos2_5_PredictBasePipeline

    pipe = Cosmos2_5_PredictBasePipeline.from_pretrained(
        tiny_pipeline_dir, safety_checker=NoOpSafetyChecker(), torch_dtype=torch.float32, local_files_only=True
    )
    prompts = ["pick up the red block", "a sentence the tokenizer never saw: zebra quartz!"]
    expected = pipe._get_prompt_embeds(prompts, max_sequence_length=64, device=torch.device("cpu"))
    with torch.no_grad():
        ours = encode_prompts(pipe.text_encoder, pipe.tokenizer, prompts, max_length=64)
    assert ours.shape == (2, 64, 32 * 2)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)


def test_condition_latent_equals_first_latent_of_padded_clip(tiny_model_cfg):
    """The Wan VAE is causal: encoding frame 0 alone gives the padded clip's first latent frame."""
    model = build_framework(tiny_model_cfg())
    vae = model.backbone_interface.extractor.vae
    frame = torch.rand(2, 3, 1, 32, 64) * 2 - 1
    clip = torch.cat([frame, torch.zeros(2, 3, 4, 32, 64)], dim=2)
    with torch.no_grad():
        alone = vae.encode(frame).latent_dist.mode()
        padded = vae.encode(clip).latent_dist.mode()
    assert padded.shape[2] == 2
    torch.testing.assert_close(alone[:, :, 0], padded[:, :, 0], rtol=1e-4, atol=1e-5)


def test_latents_are_normalised_by_the_std(tiny_model_cfg):
    """diffusers 0.38 keeps the std itself in latents_std (0.39+ keeps 1/std); pin the meaning we rely on."""
    model = build_framework(tiny_model_cfg())
    extractor = model.backbone_interface.extractor
    config = extractor.vae.config
    torch.testing.assert_close(extractor.latents_std.flatten(), torch.tensor(config.latents_std))
    latents = torch.randn(1, config.z_dim, 1, 2, 2)
    expected = (latents - torch.tensor(config.latents_mean).view(1, -1, 1, 1, 1)) / torch.tensor(
        config.latents_std
    ).view(1, -1, 1, 1, 1)
    torch.testing.assert_close(extractor._normalise(latents), expected)


def _count_text_encoder_calls(model) -> list:
    calls = []
    model.backbone_interface.extractor.text_encoder.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_prompt_cache_encodes_each_instruction_once(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    extractor = model.backbone_interface.extractor
    calls = _count_text_encoder_calls(model)
    examples = tiny_examples(cfg, batch=3)
    instructions = [e["lang"] for e in examples]

    model.cache_prompts(instructions + instructions)
    assert len(calls) == 1  # one batch for the three unique instructions
    first = extractor.prompt_embeddings(instructions, torch.device("cpu"))
    model(examples)
    model(examples)
    second = extractor.prompt_embeddings(instructions, torch.device("cpu"))
    assert len(calls) == 1
    assert torch.equal(first, second)
    with torch.no_grad():
        direct = encode_prompts(extractor.text_encoder, extractor.tokenizer, instructions, 64)
    torch.testing.assert_close(first, direct)

    calls.clear()
    model.backbone_interface([examples[0]["image"]], ["an instruction not cached yet"], True, False)
    assert len(calls) == 1


def test_cached_embeddings_stay_in_host_memory_and_are_copied_per_batch(tiny_model_cfg, tiny_examples):
    """At full size an entry is 98 MiB, and a mixture has thousands of instructions: no device could hold them."""
    model = build_framework(tiny_model_cfg())
    freeze_modules(model, FROZEN)
    cache = model.backbone_interface.extractor.prompt_cache
    calls = _count_text_encoder_calls(model)
    instructions = ["pick up the red block", "open the drawer"]
    model.cache_prompts(instructions)
    on_device = cache.lookup(instructions[::-1], torch.device("meta"))
    assert on_device.device.type == "meta" and on_device.shape == (2, 64, 64)
    assert all(cache._table[p].device.type == "cpu" for p in instructions)
    assert len(calls) == 1 and cache.nbytes() == 2 * 64 * 64 * 4


def test_without_prompt_cache_every_forward_encodes(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("framework.cosmos25.prompt_cache=false")
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    calls = _count_text_encoder_calls(model)
    examples = tiny_examples(cfg)
    model.cache_prompts([e["lang"] for e in examples])
    model(examples)
    model(examples)
    assert len(calls) == 2


def test_trainable_text_encoder_bypasses_the_cache(tiny_model_cfg, tiny_examples):
    """A cached embedding has no graph; with a trainable text encoder the original's gradient must survive."""
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    examples = tiny_examples(cfg)
    model.cache_prompts([e["lang"] for e in examples])
    with pytest.warns(UserWarning, match="prompt_cache is on but the text encoder is trainable"):
        losses = model(examples)
    losses["future_video_loss"].backward()
    grads = [p.grad for p in model.backbone_interface.extractor.text_encoder.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize(
    "frames, expected",
    [(1, None), (5, None), (9, None), (8, "frames 6-8 are dropped; use 5 or 9"), (6, "frame 6 is dropped; use 5 or 9")],
)
def test_wasted_frames_message(frames, expected):
    message = wasted_frames_message(frames, 4)
    if expected is None:
        assert message is None
    else:
        assert expected in message and "video_delta_indices" in message
    assert latent_frame_count(frames, 4) == (frames - 1) // 4 + 1
