"""The Cosmos backbone on the tiny pipeline: feature shapes, the hook, prompt embeddings."""

from __future__ import annotations

import pytest
import torch

from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules
from DiT4DiT.model.modules.cosmos_backbone import latent_frame_count, unused_parameters_expected, wasted_frames_message
from DiT4DiT.model.modules.cosmos_pipeline import NoOpSafetyChecker
from DiT4DiT.model.modules.host_to_device import model_batch
from DiT4DiT.model.modules.prompt_encoding import encode_prompts
from DiT4DiT.tools.tiny_cosmos import calibration_clips


def clip_and_instructions(model, examples) -> tuple[torch.Tensor, list[str]]:
    """What the framework hands the backbone: the examples' frames on the model's device, and their instructions."""
    batch = model_batch(examples, model.backbone_interface.device, torch.float32, targets=False, state=False)
    return batch.video, batch.instructions


@pytest.mark.parametrize("views", [1, 3])
def test_feature_and_loss_shapes(tiny_model_cfg, tiny_examples, views):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    examples = tiny_examples(cfg, batch=2, views=views)
    out = model.backbone_interface(*clip_and_instructions(model, examples), want_features=True, want_video_loss=True)
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
    out = model.backbone_interface(*clip_and_instructions(model, examples), True, True)
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


def test_the_sampled_condition_latent_tells_images_apart(tiny_model_cfg):
    """The conditioning latent is a posterior sample, as in the original; the tiny VAE's posterior is narrow, as a
    trained one's, so the sample still shows the image (at random init its std of 1 made the images noise)."""
    extractor = build_framework(tiny_model_cfg()).backbone_interface.extractor
    images = torch.rand(2, 3, 32, 64) * 2 - 1
    with torch.no_grad():
        posterior = extractor.clip_posterior((images[:, None] + 1) / 2, 1, with_future=False)
        first, again = extractor.sample_condition(posterior), extractor.sample_condition(posterior)
    between_images = (first[0] - first[1]).abs().mean()
    between_samples = (first - again).abs().mean()
    assert 0 < between_samples < 1e-3 * between_images


def test_normalised_latents_of_images_have_about_unit_scale(tiny_model_cfg):
    """The tiny VAE's latents_mean/std are measured on scenes, as a trained VAE's are, so normalised latents of
    unseen scenes are about N(0, 1) per channel and a 4-pixel marker that moves changes them visibly. With the
    earlier made-up statistics the channels' spread over scenes was 0.05-0.12 and the marker moved them by 0.1."""
    extractor = build_framework(tiny_model_cfg()).backbone_interface.extractor
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)  # not the snapshot's seed: scenes the statistics were not measured on
        scenes = calibration_clips(count=16)[:, :, 0]
    plain = torch.full((2, 3, 32, 32), 0.2)
    plain[0, :, 8:12, 8:12] = plain[1, :, 8:12, 16:20] = -0.8
    with torch.no_grad():
        latents, marker = (extractor.sample_condition(extractor.clip_posterior((frames[:, None] + 1) / 2, 1, False))
                           for frames in (scenes, plain))
    assert latents.mean((0, 2, 3, 4)).abs().max() < 1.0
    spread = latents.std((0, 2, 3, 4))
    assert 0.4 < spread.min() and spread.max() < 2.5, spread
    assert (marker[0] - marker[1]).abs().max() > 0.4


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


def test_early_exit_gives_the_full_pass_features_and_losses(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    extractor = model.backbone_interface.extractor
    assert extractor.extract_layer + 1 < len(extractor.transformer.transformer_blocks)
    last_block_calls = []
    extractor.transformer.transformer_blocks[-1].register_forward_hook(lambda *args: last_block_calls.append(1))
    examples = tiny_examples(cfg)
    video, instructions = clip_and_instructions(model, examples)

    def run(early_exit: bool, want_video_loss: bool):
        extractor.early_exit = early_exit
        last_block_calls.clear()
        torch.manual_seed(3)
        out = model.backbone_interface(video, instructions, want_features=True, want_video_loss=want_video_loss)
        return out, len(last_block_calls)

    (full, full_calls), (early, early_calls) = run(False, False), run(True, False)
    assert (full_calls, early_calls) == (1, 0)
    assert torch.equal(full.features, early.features)
    (full, _), (early, early_calls) = run(False, True), run(True, True)
    assert early_calls == 1  # the video-loss pass still runs every block
    assert torch.equal(full.features, early.features)
    assert torch.equal(full.future_video_loss, early.future_video_loss)


TEXT_ENCODER, VAE, TRANSFORMER = (f"backbone_interface.extractor.{m}" for m in ("text_encoder", "vae", "transformer"))


@pytest.mark.parametrize("mode, frozen, expected", [
    ("joint", f"{TEXT_ENCODER},{VAE}", False),
    ("joint", TEXT_ENCODER, True),
    ("action", f"{TEXT_ENCODER},{VAE}", True),
    ("action", f"{TEXT_ENCODER},{VAE},{TRANSFORMER}", False),
    ("video", f"{TEXT_ENCODER},{VAE}", False),
    ("video", "", True),
])
def test_unused_parameters_are_expected_exactly_when_a_step_leaves_some_without_gradient(
        tiny_model_cfg, tiny_examples, mode, frozen, expected):
    cfg = tiny_model_cfg(f"framework.cosmos25.training={mode}", f"trainer.freeze_modules='{frozen}'",
                         "framework.cosmos25.prompt_cache=false")
    model = build_framework(cfg)
    freeze_modules(model, cfg.trainer.freeze_modules)
    sum(model(tiny_examples(cfg)).values()).backward()
    without_gradient = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert unused_parameters_expected(cfg.trainer.freeze_modules, cfg.framework.cosmos25.training) == expected
    assert bool(without_gradient) == expected, without_gradient[:3]


def test_the_model_places_its_stores_where_the_config_says(tiny_model_cfg, tmp_path):
    """The store folders come from the typed config (ConfigSections.store_dir): the model does not reach into the
    data package for them, and a prompt store without its own folder lives under datasets.vla_data.cache_dir."""
    cfg = tiny_model_cfg("framework.cosmos25.prompt_store_dir=null", f"datasets.vla_data.cache_dir={tmp_path / 'cache'}")
    assert cfg.store_dir("prompt") == tmp_path / "cache" / "prompt_embeddings"
    assert cfg.store_dir("latent") == tmp_path / "cache" / "vae_latents"
    model = build_framework(cfg)
    assert model.backbone_interface.extractor.prompt_store.folder.parent == cfg.store_dir("prompt")


def test_the_vae_factors_are_the_snapshots_as_the_pipeline_reads_them(tiny_pipeline_dir):
    """bench/bench_model.py's in-memory components and the model's pipeline loader read the VAE's temporal and
    spatial factors from the same place (pipeline_shape.vae_factors) rather than writing 4 and 8 down."""
    import json

    from DiT4DiT.model.modules.cosmos_pipeline import load_cosmos_components
    from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape, vae_factors

    components = load_cosmos_components(tiny_pipeline_dir, "float32", "sdpa")
    factors = vae_factors(json.loads((tiny_pipeline_dir / "vae" / "config.json").read_text()))
    assert factors == (components.vae_scale_factor_temporal, components.vae_scale_factor_spatial)
    assert read_pipeline_shape(tiny_pipeline_dir).temporal_factor == factors[0]
