"""The memory estimate's activation figures come from measurement: a smaller width measured now agrees with
them, and each setting (checkpointing, ZeRO stage, the NPU's RoPE copies, the released text encoder) moves the
estimate the way it moves memory."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from DiT4DiT.memory.estimate import (GIB, HEAD_BYTES_WITHOUT_DEEPSPEED, action_head_params, action_head_saved_bytes,
                                     cosmos_block_saved_bytes, estimate_training_memory, text_encoder_graph_bytes,
                                     text_encoder_widths, vae_condition_graph_bytes)
from DiT4DiT.memory.measured import MEASURED, NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN
from DiT4DiT.base_model.cosmos_2b import TRANSFORMER_CONFIG as COSMOS_2B_TRANSFORMER_CONFIG
from DiT4DiT.tools.measure_activation_memory import (cosmos_saved_bytes, cosmos_transformer, qwen_text_encoder,
                                                     text_encoder_saved_bytes, vae_saved_bytes, wan_vae)
from helpers.sections import run_sections

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("checkpointing, frozen", [(False, False), (True, False), (False, True)],
                         ids=["plain", "checkpointed", "frozen"])
def test_a_measured_block_at_a_smaller_width_matches_the_estimate(checkpointing, frozen, one_torch_thread):
    """2 heads x 128 = 256 wide (the real head width), a shape the table was not measured at: 2 samples of
    1 latent frame x 10 x 18 patches, 96 text tokens; `frozen`: the blocks' weights frozen, the patch embedding
    before them trained."""
    heads, batch, shape, text = 2, 2, (1, 10, 18), 96
    transformer = cosmos_transformer(heads, blocks=2, text_projection=False)
    one, two = (cosmos_saved_bytes(transformer, blocks, batch, shape, text, checkpointing, frozen) for blocks in (1, 2))
    estimate = cosmos_block_saved_bytes(heads * 128, 180, text, checkpointing, batch, frozen)
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
    return run_sections(ROBOTWIN_YAML, *overrides)


def test_checkpointing_lowers_the_activations_by_the_measured_factor(header_only_2b):
    plain = estimate_training_memory(header_only_2b, *robotwin(), 16, 3)
    recomputing = estimate_training_memory(header_only_2b, *robotwin("trainer.enable_gradient_checkpointing=true"), 16, 3)
    assert plain.tokens_per_sample == 1176 and recomputing.static_gib == plain.static_gib
    block, kept = (MEASURED[name]["per_video_token"] for name in ("video_pass_block", "video_pass_checkpointed_block"))
    assert kept == 2048 * 2 and block / kept > 50  # a checkpointed block keeps only its bf16 input
    # With 28 blocks of 214 KiB per token down to 28 inputs of 4 KiB and one block rebuilt at a time, encoding the
    # 5 frames of 3 views (no grad) becomes the peak, on top of the prompt embeddings; the plain run's is 7x that.
    prompts, frames = 512 * 28 * 3584 * 2, 3 * 224 * 224 * MEASURED["vae_encode_peak_per_pixel"]["video_5_frames"]
    assert recomputing.activation_gib * GIB == pytest.approx(4 * (prompts + frames))
    assert plain.activation_gib > 7 * recomputing.activation_gib


def test_the_npu_adds_the_fused_ropes_float32_q_and_k(header_only_2b):
    npu, cuda = (estimate_training_memory(header_only_2b, *robotwin(), 16, 3, device_kind=kind) for kind in ("npu", "cuda"))
    added = NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN * 2048 * 1176 * 4 * 28  # every block's q and k, batch 4
    assert (npu.activation_gib - cuda.activation_gib) * GIB == pytest.approx(added)
    assert added / GIB == pytest.approx(2.0, abs=0.1)  # issue 32: "about 2 GiB per die at the robotwin shape"


def test_zero3_shards_the_weights_and_gradients_too(header_only_2b):
    two, three = (estimate_training_memory(header_only_2b, *robotwin(), 16, 3, zero_stage=stage) for stage in (2, 3))
    assert three.activation_gib == two.activation_gib and three.static_gib < two.static_gib
    trainable = SNAPSHOT_PARAMETERS["transformer"]  # and the head, which both count alike
    assert (two.static_gib - three.static_gib) * GIB > 4 * trainable * 15 / 16 - 2 * 10**9 * 2


def test_a_released_text_encoder_counts_only_at_start_up(header_only_2b):
    released = estimate_training_memory(header_only_2b, *robotwin(), 16, 3)
    kept = estimate_training_memory(header_only_2b, *robotwin("trainer.save_full_state_dict=true"), 16, 3)
    text_encoder = 2 * SNAPSHOT_PARAMETERS["text_encoder"] / GIB
    assert kept.static_gib == pytest.approx(released.static_gib + text_encoder) == released.startup_gib
    assert released.total_gib == max(released.static_gib + released.activation_gib, released.startup_gib)


# The transformer's tensors as the real snapshot names them (sizes made up): embeddings before the blocks, two
# blocks, the output layers after them.
NAMED_TRANSFORMER = {"patch_embed.proj.weight": 1_000_000, "crossattn_proj.0.weight": 100_000_000,
                     "time_embed.t_embedder.linear_1.weight": 16_000_000,
                     "transformer_blocks.0.attn1.to_q.weight": 900_000_000,
                     "transformer_blocks.1.attn1.to_q.weight": 900_000_000,
                     "norm_out.linear_1.weight": 1_500_000, "proj_out.weight": 130_000}
BLOCKS = "backbone_interface.extractor.transformer.transformer_blocks"


@pytest.fixture(scope="module")
def named_2b(tmp_path_factory, header_only_2b) -> Path:
    """header_only_2b with the transformer stored as NAMED_TRANSFORMER's tensors."""
    folder = tmp_path_factory.mktemp("cosmos-2b-named")
    for part in SNAPSHOT_PARAMETERS:
        (folder / part).symlink_to(header_only_2b / part)
    (folder / "transformer").unlink()
    (folder / "transformer").mkdir()
    (folder / "transformer" / "config.json").write_text(json.dumps(COSMOS_2B_TRANSFORMER_CONFIG))
    offsets, header = 0, {}
    for name, count in NAMED_TRANSFORMER.items():
        header[name] = {"dtype": "BF16", "shape": [count], "data_offsets": [offsets, offsets + 2 * count]}
        offsets += 2 * count
    raw = json.dumps(header).encode()
    (folder / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return folder


def frozen_robotwin(*modules: str):
    freeze = ",".join(["backbone_interface.extractor.text_encoder", "backbone_interface.extractor.vae", *modules])
    return robotwin(f"trainer.freeze_modules={freeze}")


def test_freezing_counts_each_stored_tensor_under_the_frozen_modules(named_2b):
    """trainer.freeze_modules naming the transformer's blocks (as the full-size rehearsal does) freezes their
    tensors only: the embeddings, the text projection and the output layers keep gradients and Adam state, and the
    video pass keeps the frozen blocks' activations, since its backward goes through them to the patch embedding."""
    framework, trainer, data = frozen_robotwin(BLOCKS)
    est = estimate_training_memory(named_2b, framework, trainer, data, 16, 3)
    blocks = sum(n for name, n in NAMED_TRANSFORMER.items() if name.startswith("transformer_blocks."))
    trainable = sum(NAMED_TRANSFORMER.values()) - blocks + action_head_params(framework.action_model)
    frozen = blocks + SNAPSHOT_PARAMETERS["vae"]  # the frozen text encoder is released
    assert est.static_gib * GIB == pytest.approx(2 * frozen + (4 + 12 / 16) * trainable)

    everything = estimate_training_memory(named_2b, *frozen_robotwin("backbone_interface.extractor.transformer"), 16, 3)
    nothing = estimate_training_memory(named_2b, *robotwin(), 16, 3)
    # The frozen blocks' video pass: each block keeps what its backward to the input needs, not its linear inputs.
    per_block = (cosmos_block_saved_bytes(2048, 1176, 512, False, 4) - cosmos_block_saved_bytes(2048, 1176, 512, False, 4, True))
    assert per_block > 0.2 * cosmos_block_saved_bytes(2048, 1176, 512, False, 4)
    assert (nothing.activation_gib - est.activation_gib) * GIB == pytest.approx(28 * per_block)
    assert everything.activation_gib < est.activation_gib / 5  # no video pass kept: the VAE encode is the peak

    # Training only the output layers keeps no block's activations either.
    before = ",".join(f"backbone_interface.extractor.transformer.{m}" for m in ("patch_embed", "crossattn_proj", "time_embed"))
    outputs_only = estimate_training_memory(named_2b, *frozen_robotwin(BLOCKS, before), 16, 3)
    assert outputs_only.activation_gib == everything.activation_gib


def test_without_deepspeed_adamw_keeps_its_state_in_each_parameters_dtype(named_2b):
    """ZeRO stage 0 (plain AdamW, as the CPU trainer and the device check run): bf16 parts hold weight, gradient
    and two moments in bf16 (8 B per trained parameter), the float32 action head 16 B and float32 activations;
    before the first step (while the prompt store fills) only the weights exist."""
    framework, trainer, data = frozen_robotwin(BLOCKS)
    plain, zero2 = (estimate_training_memory(named_2b, framework, trainer, data, 1, 3, zero_stage=z, device_kind="cpu")
                    for z in (0, 2))
    blocks = sum(n for name, n in NAMED_TRANSFORMER.items() if name.startswith("transformer_blocks."))
    trained, head = sum(NAMED_TRANSFORMER.values()) - blocks, action_head_params(framework.action_model)
    frozen = blocks + SNAPSHOT_PARAMETERS["vae"]
    head_bytes = HEAD_BYTES_WITHOUT_DEEPSPEED
    assert plain.static_gib * GIB == pytest.approx(2 * frozen + 8 * trained + 4 * head_bytes * head)
    assert plain.startup_gib * GIB == pytest.approx(2 * (frozen + SNAPSHOT_PARAMETERS["text_encoder"] + trained)
                                                    + head_bytes * head)
    assert zero2.static_gib * GIB == pytest.approx(2 * frozen + 16 * (trained + head))
    # The head computes in float32: twice the bf16 head's saved bytes, for each of the batch's 4 samples.
    head_saved = 4 * action_head_saved_bytes(framework.action_model, trainer.repeated_diffusion_steps, 1176, False)
    assert (plain.activation_gib - zero2.activation_gib) * GIB == pytest.approx(head_saved)


# --- what the configs that train everything add: the text encoder's and the VAE's graphs ---------------------------

@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_a_measured_text_encoder_layer_at_another_width_matches_the_estimate(checkpointing, one_torch_thread):
    """A Qwen2.5-VL text encoder of 7 heads x 128 = 896 wide (1 KV head: the real one's 7 query heads per KV head),
    MLP 2048, 2 prompts of 96 tokens: none of it measured by the table (3584 wide, MLP 18944 and 256, 128-512
    tokens). Per layer = (2 layers) - (1 layer), against the estimate's layer for those widths (on the CPU: its
    grouped-query attention keeps the S^2 softmax, which the estimate counts for device kind cpu)."""
    widths = {"hidden": 896, "intermediate": 2048, "heads": 7, "kv_heads": 1}
    one, two = (text_encoder_saved_bytes(qwen_text_encoder(layers, **widths), 2, 96, checkpointing)
                for layers in (1, 2))
    per_layer = {layers: {**widths, "layers": layers} for layers in (1, 2)}
    estimate = (text_encoder_graph_bytes(per_layer[2], 2, 96, checkpointing, "cpu")
                - text_encoder_graph_bytes(per_layer[1], 2, 96, checkpointing, "cpu"))
    assert two - one == pytest.approx(estimate, rel=0.10)


def test_a_measured_vae_encode_with_grad_at_another_width_matches_the_estimate(one_torch_thread):
    """The Wan VAE at a third of its width (base_dim 32) encoding the conditioning frames of 2 samples of 64 x 96 px
    with its weights trained: what autograd keeps, against the table's 96-wide figure scaled by the width."""
    vae = wan_vae(base_dim=32)
    assert vae_saved_bytes(vae, 2, 1, 64, 96) == pytest.approx(vae_condition_graph_bytes(2, 64 * 96, 32), rel=0.10)


LIBERO_YAML = ROOT / "DiT4DiT/config/libero/dit4dit_libero.yaml"
THIN_MLP = 256  # the full-size snapshot's thin text encoder (DiT4DiT/tools/full_size_cosmos.py)


@pytest.fixture(scope="module")
def real_2b(tmp_path_factory) -> Path:
    """The real snapshot's configs and headers (its 8.3B text encoder), and the same with the thin encoder's MLP."""
    from DiT4DiT.tools.full_size_cosmos import write_shapes_only

    return write_shapes_only(tmp_path_factory.mktemp("cosmos-2b") / "shapes")


def libero(*overrides: str):
    return run_sections(LIBERO_YAML, *overrides)


def test_the_graphs_count_exactly_when_the_config_trains_those_modules(real_2b):
    """LIBERO trains everything: its estimate holds the text encoder's graph (every layer, real widths) and the VAE's
    (the conditioning frame of 2 views of 224 px); frozen, neither counts; each counts on its own."""
    text = {"hidden": 3584, "intermediate": 18944, "layers": 28, "heads": 28}
    batch, pixels = 16, 2 * 224 * 224
    text_graph = text_encoder_graph_bytes(text, batch, 512, False, "npu")
    vae_graph = vae_condition_graph_bytes(batch, pixels, 96)
    # 282 KiB per token per layer, and 21 KiB per token for the embedding and the last norm: 4.1 GB per prompt
    assert text_graph / batch == pytest.approx(512 * (28 * (136720 + 8 * 18944) + 21516))
    runs = {name: estimate_training_memory(real_2b, *libero(*overrides), 16, 2) for name, overrides in {
        "everything": (), "text encoder frozen": ("trainer.freeze_modules=backbone_interface.extractor.text_encoder",),
        "VAE frozen": ("trainer.freeze_modules=backbone_interface.extractor.vae",),
        "both frozen": ("trainer.freeze_modules=backbone_interface.extractor.text_encoder,"
                        "backbone_interface.extractor.vae",)}.items()}
    assert runs["everything"].trained_inputs_gib * GIB == pytest.approx(text_graph + vae_graph)
    assert runs["text encoder frozen"].trained_inputs_gib * GIB == pytest.approx(vae_graph)
    assert runs["VAE frozen"].trained_inputs_gib * GIB == pytest.approx(text_graph)
    assert runs["both frozen"].trained_inputs_gib == 0.0
    assert (runs["everything"].activation_gib - runs["both frozen"].activation_gib) * GIB == pytest.approx(
        text_graph + vae_graph)
    # The text encoder's layers checkpointed: each layer's output, and one layer rebuilt at a time.
    recomputed = estimate_training_memory(real_2b, *libero("trainer.text_encoder_gradient_checkpointing=true"), 16, 2)
    layer = text_encoder_graph_bytes({**text, "layers": 1}, batch, 512, False, "npu") - text_encoder_graph_bytes(
        {**text, "layers": 0}, batch, 512, False, "npu")
    checkpointed = text_encoder_graph_bytes(text, batch, 512, True, "npu")
    assert recomputed.trained_inputs_gib * GIB == pytest.approx(checkpointed + vae_graph)
    assert checkpointed == pytest.approx(layer + batch * 512 * (28 * 7168 + 28684))  # each layer's bf16 output
    assert checkpointed < text_graph / 9


def test_a_trained_vae_keeps_the_video_pass_graph_though_the_transformer_is_frozen(real_2b):
    """The VAE's gradient comes back through every block of the video pass, so its graph is kept even when the
    whole transformer is frozen (frozen blocks: what the backward to their input needs)."""
    frozen = ("backbone_interface.extractor.text_encoder,backbone_interface.extractor.transformer,"
              "backbone_interface.extractor.vae")
    nothing_before = estimate_training_memory(real_2b, *robotwin(f"trainer.freeze_modules={frozen}"), 16, 3)
    vae_trained = estimate_training_memory(real_2b, *robotwin(
        "trainer.freeze_modules=backbone_interface.extractor.text_encoder,backbone_interface.extractor.transformer"),
        16, 3)
    passes = vae_trained.activation_gib - vae_trained.trained_inputs_gib - nothing_before.activation_gib
    assert passes * GIB > 28 * cosmos_block_saved_bytes(2048, 1176, 512, False, 4, frozen=True)


def test_a_thin_text_encoder_follows_its_own_widths(real_2b, tmp_path):
    """The full-size snapshot's thin encoder (MLP 256): the estimate reads its config.json, so its graph is the real
    one's with the MLP's 8 B per unit at 256 instead of 18944."""
    thin = tmp_path / "thin"
    for part in ("transformer", "vae", "scheduler", "tokenizer", "model_index.json"):
        (thin / part).parent.mkdir(exist_ok=True)
        (thin / part).symlink_to(real_2b / part)
    (thin / "text_encoder").mkdir()
    config = json.loads((real_2b / "text_encoder" / "config.json").read_text())
    config["text_config"]["intermediate_size"] = THIN_MLP
    (thin / "text_encoder" / "config.json").write_text(json.dumps(config))
    for header in (real_2b / "text_encoder").glob("*.safetensors"):
        (thin / "text_encoder" / header.name).symlink_to(header)
    real, thinned = (estimate_training_memory(folder, *libero(), 16, 2) for folder in (real_2b, thin))
    vae_graph = vae_condition_graph_bytes(16, 2 * 224 * 224, 96)
    ratio = (136720 + 8 * THIN_MLP) / (136720 + 8 * 18944)
    assert (thinned.trained_inputs_gib * GIB - vae_graph) == pytest.approx(
        (real.trained_inputs_gib * GIB - vae_graph) * ratio, rel=0.01)


def test_the_text_encoder_widths_come_from_either_config_layout():
    nested = {"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 3584, "intermediate_size": 256,
                                                          "num_hidden_layers": 28, "num_attention_heads": 28}}
    flat = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28}
    assert text_encoder_widths(nested) == {"hidden": 3584, "intermediate": 256, "layers": 28, "heads": 28}
    assert text_encoder_widths(flat)["intermediate"] == 18944


def test_an_offloaded_optimizer_moves_its_state_to_host_memory(real_2b):
    """ZeRO-2 with offload_optimizer: the device keeps bf16 weights and gradients (4 B per trained parameter), the
    host 16 B / processes (fp32 master weights, both moments and the gradient partition)."""
    on_device, offloaded = (estimate_training_memory(real_2b, *libero(), 16, 2, offload_optimizer=o) for o in (False, True))
    assert offloaded.activation_gib == on_device.activation_gib and on_device.host_offload_gib == 0.0
    trainable = offloaded.host_offload_gib * GIB * 16 / 16
    assert (on_device.static_gib - offloaded.static_gib) * GIB == pytest.approx(12 / 16 * trainable)
    assert trainable == pytest.approx(sum(SNAPSHOT_PARAMETERS.values()), rel=0.05)  # everything trains in LIBERO


def test_each_recomputed_block_trades_its_activations_for_its_input(header_only_2b):
    """gradient_checkpointing_blocks=N: between 7 and 14 recomputed blocks the estimate falls by 7 blocks' worth of
    activations less their inputs (and, on an NPU, their RoPE copies), batch 4, one flow-matching pass; 0 is no
    checkpointing."""
    seven, fourteen = (estimate_training_memory(header_only_2b, *robotwin(f"trainer.gradient_checkpointing_blocks={n}"),
                                                16, 3) for n in (7, 14))
    per_block = (cosmos_block_saved_bytes(2048, 1176, 512, False, 4) - cosmos_block_saved_bytes(2048, 1176, 512, True, 4)
                 + NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN * 2048 * 1176 * 4)
    assert (seven.activation_gib - fourteen.activation_gib) * GIB == pytest.approx(7 * per_block)
    none = estimate_training_memory(header_only_2b, *robotwin("trainer.gradient_checkpointing_blocks=0"), 16, 3)
    assert none == estimate_training_memory(header_only_2b, *robotwin(), 16, 3)
    assert none.activation_gib > seven.activation_gib > fourteen.activation_gib
