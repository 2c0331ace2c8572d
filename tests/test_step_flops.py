"""The analytic FLOPs of a training step (DiT4DiT/step_flops.py): each part's formula against torch's
FlopCounterMode on the CPU (which counts every matmul and convolution there), at shapes of its own; and the step
as each config trains it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from DiT4DiT.memory_estimate import text_encoder_widths
from DiT4DiT.memory_plan import ORIGINAL_CONFIGS
from DiT4DiT.model.modules.action_model.flow_matching_head import build_action_head
from DiT4DiT.model.modules.prompt_encoding import embed_token_ids
from DiT4DiT.step_flops import (action_head_forward_flops, snapshot_configs, text_encoder_forward_flops,
                                training_step_flops, vae_encode_flops)
from DiT4DiT.tools.measure_activation_memory import qwen_text_encoder, wan_vae
from helpers.sections import run_sections

ROOT = Path(__file__).resolve().parents[1]


def counted(run) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


@pytest.mark.parametrize("frames, high, wide", [(1, 64, 96), (5, 64, 64), (9, 32, 64)])
def test_the_vae_encode_count_is_what_the_convolutions_do(frames, high, wide, one_torch_thread):
    """The Wan VAE's layout at a sixth of its width: the conditioning frame, a 5-frame clip and a 9-frame one (two
    temporal downsamples: 9 -> 5 -> 3 frames)."""
    vae = wan_vae(base_dim=16).float()
    video = torch.rand(2, 3, frames, high, wide)
    assert counted(lambda: vae.encode(video)) == pytest.approx(vae_encode_flops(dict(vae.config), 2, frames, high, wide),
                                                               rel=0.01)


def test_the_text_encoder_count_is_what_its_layers_do(one_torch_thread):
    """Linear layers exactly; the CPU's math attention computes the full square where a causal kernel computes half."""
    encoder = qwen_text_encoder(2, hidden=256, intermediate=512, heads=2, kv_heads=1).float()
    ids = torch.randint(0, 1000, (2, 64))
    analytic = text_encoder_forward_flops(text_encoder_widths(encoder.config.to_dict()), 2, 64, kv_heads=1)
    assert counted(lambda: embed_token_ids(encoder, ids)) == pytest.approx(analytic["linear"] + 2 * analytic["attention"],
                                                                           rel=0.01)


def test_the_action_head_count_is_what_its_layers_do(one_torch_thread):
    """The robotwin head (DiT-B, 16 interleaved layers, state token, 8-step chunk) over 60 features 256 wide."""
    head_cfg = run_sections(ROOT / ORIGINAL_CONFIGS["robotwin"])[0].action_model
    head = build_action_head(head_cfg, feature_dim=256).train()
    features = torch.randn(2, 60, 256)
    actions = torch.randn(2, head_cfg.chunk_length, head_cfg.action_dim)
    state = torch.randn(2, 1, head_cfg.state_dim)
    mask = torch.ones_like(actions, dtype=torch.bool)
    analytic = action_head_forward_flops(head_cfg, 2, 60, 256)
    assert counted(lambda: head(features, actions, mask, state)) == pytest.approx(sum(analytic.values()), rel=0.02)


@pytest.fixture(scope="module")
def real_sizes(tmp_path_factory):
    from DiT4DiT.tools.full_size_cosmos import write_shapes_only

    return write_shapes_only(tmp_path_factory.mktemp("cosmos") / "shapes")


def step(real_sizes, name: str, *overrides: str):
    from DiT4DiT.memory_estimate import mixture_views

    framework, trainer, data = run_sections(ROOT / ORIGINAL_CONFIGS[name], *overrides)
    views = mixture_views(data.data_mix, data.data_config)
    return training_step_flops(*snapshot_configs(real_sizes), framework, trainer, data, views, 1)


def test_the_step_counts_what_each_config_runs(real_sizes):
    """robotwin (text encoder and VAE frozen, prompt store): no text encoder per step, the video pass's backward 2x;
    LIBERO trains the 8B text encoder every step, forward and backward: the larger part of its step."""
    robotwin = step(real_sizes, "robotwin")
    assert "text encoder" not in robotwin.parts
    transformer_2b = 2 * 2.0e9 * 1176  # ~2 FLOPs per parameter per token
    assert robotwin.parts["transformer video pass"] == pytest.approx(3 * transformer_2b, rel=0.25)
    libero = step(real_sizes, "libero")
    text = libero.parts["text encoder"]
    assert text == pytest.approx(3 * 2 * 7.07e9 * 512, rel=0.1)  # 28 layers of the 8B encoder, forward + backward
    assert text > libero.total / 2
    assert libero.recomputed > 0  # its config checkpoints: the recomputation is reported apart, not in the total
    frozen_blocks = step(real_sizes, "robotwin",
                         "trainer.freeze_modules=backbone_interface.extractor.text_encoder,"
                         "backbone_interface.extractor.vae,backbone_interface.extractor.transformer.transformer_blocks")
    # frozen blocks still pass the gradient back to the patch embedding: the backward is 1x, not 2x
    assert frozen_blocks.parts["transformer video pass"] == pytest.approx(
        robotwin.parts["transformer video pass"] * 2 / 3)


def test_the_vae_encodes_the_clip_once_and_a_trained_vae_its_conditioning_frame_again(real_sizes):
    """clip_encoding.encode_clip: a frozen VAE encodes the clip once (its first latent frame is the conditioning
    frame's); a trained one also encodes that frame on its own, forward and backward; the latent store runs none."""
    vae = snapshot_configs(real_sizes)[1]
    clip = vae_encode_flops(vae, 1, 5, 224, 3 * 224)  # robotwin: 3 views side by side, its 8 frames' first 5
    frame = vae_encode_flops(vae, 1, 1, 224, 3 * 224)
    assert step(real_sizes, "robotwin").parts["VAE encode"] == clip
    trained = step(real_sizes, "robotwin", "trainer.freeze_modules=backbone_interface.extractor.text_encoder")
    assert trained.parts["VAE encode"] == clip + 3 * frame
    assert step(real_sizes, "robotwin", "framework.cosmos25.latent_cache=true").parts["VAE encode"] == 0
