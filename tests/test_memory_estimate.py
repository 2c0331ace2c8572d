"""The memory estimate's activation figures come from measurement: a smaller width measured now agrees with
them, and each setting (checkpointing, ZeRO stage, the NPU's RoPE copies, the released text encoder) moves the
estimate the way it moves memory."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from DiT4DiT.config.schema import load_config
from DiT4DiT.memory_estimate import (GIB, MEASURED, NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN,
                                            cosmos_block_saved_bytes, estimate_training_memory)
from DiT4DiT.cosmos_2b import TRANSFORMER_CONFIG as COSMOS_2B_TRANSFORMER_CONFIG
from DiT4DiT.tools.measure_activation_memory import cosmos_saved_bytes, cosmos_transformer

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_a_measured_block_at_a_smaller_width_matches_the_estimate(checkpointing, one_torch_thread):
    """2 heads x 128 = 256 wide (the real head width), a shape the table was not measured at: 2 samples of
    1 latent frame x 10 x 18 patches, 96 text tokens."""
    heads, batch, shape, text = 2, 2, (1, 10, 18), 96
    transformer = cosmos_transformer(heads, blocks=2, text_projection=False)
    one, two = (cosmos_saved_bytes(transformer, blocks, batch, shape, text, checkpointing) for blocks in (1, 2))
    estimate = cosmos_block_saved_bytes(heads * 128, 180, text, checkpointing, batch)
    assert two - one == pytest.approx(estimate, rel=0.10)


ROBOTWIN_YAML = ROOT / "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"
# Parameters of the 2B snapshot's parts (rounded; the estimate reads them from the safetensors headers).
SNAPSHOT_PARAMETERS = {"transformer": 2_000_000_000, "text_encoder": 8_300_000_000, "vae": 127_000_000}


@pytest.fixture(scope="module")
def header_only_2b(tmp_path_factory) -> Path:
    """The 2B snapshot's transformer and VAE configs, and safetensors files that hold only their header (all
    the estimate reads)."""
    folder = tmp_path_factory.mktemp("cosmos-2b-headers")
    configs = {"transformer": COSMOS_2B_TRANSFORMER_CONFIG, "vae": {"base_dim": 96}, "text_encoder": {}}
    for part, count in SNAPSHOT_PARAMETERS.items():
        (folder / part).mkdir()
        (folder / part / "config.json").write_text(json.dumps(configs[part]))
        header = json.dumps({"weight": {"dtype": "BF16", "shape": [count], "data_offsets": [0, 2 * count]}}).encode()
        (folder / part / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


def robotwin(*overrides: str):
    return load_config(ROBOTWIN_YAML, list(overrides))


def test_checkpointing_lowers_the_activations_by_the_measured_factor(header_only_2b):
    plain = estimate_training_memory(header_only_2b, robotwin(), 16, 3)
    recomputing = estimate_training_memory(header_only_2b, robotwin("trainer.enable_gradient_checkpointing=true"), 16, 3)
    assert plain.tokens_per_sample == 1176 and recomputing.static_gib == plain.static_gib
    block, kept = (MEASURED[name]["per_video_token"] for name in ("video_pass_block", "video_pass_checkpointed_block"))
    assert kept == 2048 * 2 and block / kept > 50  # a checkpointed block keeps only its bf16 input
    # With 28 blocks of 214 KiB per token down to 28 inputs of 4 KiB and one block rebuilt at a time, encoding the
    # 5 frames of 3 views (no grad) becomes the peak, on top of the prompt embeddings; the plain run's is 7x that.
    prompts, frames = 512 * 28 * 3584 * 2, 3 * 224 * 224 * MEASURED["vae_encode_peak_per_pixel"]["video_5_frames"]
    assert recomputing.activation_gib * GIB == pytest.approx(4 * (prompts + frames))
    assert plain.activation_gib > 7 * recomputing.activation_gib


def test_the_npu_adds_the_fused_ropes_float32_q_and_k(header_only_2b):
    npu, cuda = (estimate_training_memory(header_only_2b, robotwin(), 16, 3, device_kind=kind) for kind in ("npu", "cuda"))
    added = NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN * 2048 * 1176 * 4 * 28  # every block's q and k, batch 4
    assert (npu.activation_gib - cuda.activation_gib) * GIB == pytest.approx(added)
    assert added / GIB == pytest.approx(2.0, abs=0.1)  # issue 32: "about 2 GiB per die at the robotwin shape"


def test_zero3_shards_the_weights_and_gradients_too(header_only_2b):
    two, three = (estimate_training_memory(header_only_2b, robotwin(), 16, 3, zero_stage=stage) for stage in (2, 3))
    assert three.activation_gib == two.activation_gib and three.static_gib < two.static_gib
    trainable = SNAPSHOT_PARAMETERS["transformer"]  # and the head, which both count alike
    assert (two.static_gib - three.static_gib) * GIB > 4 * trainable * 15 / 16 - 2 * 10**9 * 2


def test_a_released_text_encoder_counts_only_at_start_up(header_only_2b):
    released = estimate_training_memory(header_only_2b, robotwin(), 16, 3)
    kept = estimate_training_memory(header_only_2b, robotwin("trainer.save_full_state_dict=true"), 16, 3)
    text_encoder = 2 * SNAPSHOT_PARAMETERS["text_encoder"] / GIB
    assert kept.static_gib == pytest.approx(released.static_gib + text_encoder) == released.startup_gib
    assert released.total_gib == max(released.static_gib + released.activation_gib, released.startup_gib)
