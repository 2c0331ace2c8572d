"""Per-device memory need of a training run, from safetensors headers, the config and measured activations.

Static part, exact up to the action head, per stored tensor: a tensor is frozen when `trainer.freeze_modules` names
its module or one containing it (tensor names prefixed by the component's module path). Under DeepSpeed (bf16, the
whole model cast): frozen weights 2 B/param and, per trainable parameter, bf16 weights and gradients (2 + 2 B) plus
fp32 master weights and Adam moments (12 B); ZeRO-2 shares the 12 B across the processes, ZeRO-3 shares everything
and gathers up to `stage3_max_live_parameters` at a time. ZeRO-2 with the optimizer offloaded keeps the 12 B (and
an fp32 copy of the gradient partition, 4 B) in host memory instead: 16 B / processes per trainable parameter. Without DeepSpeed (stage 0) nothing is cast: the
pipeline's parts keep `framework.cosmos25.torch_dtype`, the action head float32 (as torch builds it), and plain
AdamW keeps gradients and both moments in each parameter's own dtype (4 x its bytes per trainable parameter). A
frozen text encoder is released once the prompt store holds every instruction, so it counts only at start-up.

A config that trains the text encoder or the VAE (the original's LIBERO, RoboCasa-GR1 and G1 configs train
everything) adds their graphs, held from the forward's start to the backward: the text encoder runs with grad every
step (the prompt store cannot hold a trained encoder's output), and `clip_encoding.encode_clip` encodes the
conditioning frame with grad. Both are scaled from the snapshot's own config.json widths (a thin encoder's MLP
is its own), and the video pass then keeps its graph through the blocks whatever the transformer trains: the
gradient reaches those inputs only through it.

Activations come from MEASURED: bytes that autograd saves for backward (and peaks of the no-grad passes), counted
on the CPU with real components at the real width by `python -m DiT4DiT.tools.measure_activation_memory`, which
prints this table; tests/test_memory_estimate.py measures a smaller width and holds the estimate to within 10%.
What the CPU counts and a device does not, or the other way round, is listed with the figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from DiT4DiT.config.sections import (DatasetsVlaDataSection, FrameworkActionModelSection, FrameworkCosmos25Section,
                                     FrameworkSection, TrainerSection)
from DiT4DiT.facts import (DIT_SIZES, DTYPE_BYTES, FRAME_SIDE_MULTIPLE, SAMPLED_LOSS_TYPES, checkpointed_block_count,
                           is_under, latent_frame_count, module_paths)
from DiT4DiT.base_model.safetensors_header import read_header
from DiT4DiT.memory.measured import MEASURED, MEASURED_HEAD, NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN

GIB = 1024**3

# DeepSpeed ZeRO-3 gathers at most this many parameters at once (ds_zero3.json's stage3_max_live_parameters).
ZERO3_MAX_LIVE_PARAMETERS = 10**9
# Bytes per parameter of the action head outside DeepSpeed: torch builds it in float32 and nothing casts it (the
# pipeline's parts load in framework.cosmos25.torch_dtype); its step runs under float32 autocast.
HEAD_BYTES_WITHOUT_DEEPSPEED = DTYPE_BYTES["float32"]


def safetensors_tensor_sizes(folder: Path) -> dict[str, int] | None:
    """Elements of each tensor stored in the *.safetensors files of a folder (headers only), by name, or None when
    there are none."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    sizes = {}
    for path in files:
        sizes.update({name: math.prod(t["shape"]) for name, t in read_header(path).tensors.items()})
    return sizes


def safetensors_param_count(folder: Path) -> int | None:
    """Parameters stored in the *.safetensors files of a folder (header only), or None when there are none."""
    sizes = safetensors_tensor_sizes(folder)
    return None if sizes is None else sum(sizes.values())


def head_size(head: FrameworkActionModelSection) -> tuple[int, int]:
    """(inner width, layers) of the action DiT."""
    dit = head.diffusion_model_cfg
    heads, width = DIT_SIZES[head.action_model_type]
    return (dit.num_attention_heads or heads) * (dit.attention_head_dim or width), dit.num_layers


def action_head_params(head: FrameworkActionModelSection) -> int:
    """Approximate size of the flow-matching action DiT (blocks dominate: ~12 d^2 per block plus cross-attention)."""
    d, layers = head_size(head)
    blocks = layers * (12 * d * d + 2 * d * head.diffusion_model_cfg.cross_attention_dim)
    mlps = 4 * head.hidden_size**2
    return blocks + mlps


@dataclass(frozen=True)
class Estimate:
    static_gib: float  # weights, gradients and optimizer state while training
    activation_gib: float  # activations of one micro-batch at its peak
    tokens_per_sample: int  # video tokens the transformer sees per sample
    startup_gib: float = 0.0  # memory while the text encoder fills the prompt store (after prepare, before step 1)
    trained_inputs_gib: float = 0.0  # of activation_gib: the graphs of a trained text encoder and VAE
    host_offload_gib: float = 0.0  # host memory per process for an offloaded optimizer (ZeRO-2 offload)

    @property
    def total_gib(self) -> float:
        return max(self.static_gib + self.activation_gib, self.startup_gib)


PARTS = {name: f"backbone_interface.extractor.{name}" for name in ("text_encoder", "transformer", "vae")}
# The transformer's modules after its last block: training only these keeps no block's activations for backward.
OUTPUT_LAYERS = ("norm_out", "proj_out")


def is_frozen(module: str, freeze_modules: str | None) -> bool:
    """Whether `trainer.freeze_modules` freezes `module`: it names the module or one that contains it."""
    return is_under(module, module_paths(freeze_modules))


@dataclass(frozen=True)
class PartSize:
    frozen: int  # parameters
    trainable: int
    graph_through_blocks: bool = False  # the transformer: something at or before its blocks trains
    blocks_frozen: bool = False  # the transformer: every weight of its blocks is frozen


def part_sizes(tensors: dict[str, int], module: str, freeze_modules: str | None) -> PartSize:
    """Frozen and trainable parameters of one component whose stored tensors are `tensors`, each tensor frozen
    when `trainer.freeze_modules` covers `module`.<its name>."""
    trainable = {name: n for name, n in tensors.items() if not is_frozen(f"{module}.{name}", freeze_modules)}
    count = sum(trainable.values())
    blocks = [name for name in tensors if is_under(name, ("transformer_blocks",))]
    return PartSize(sum(tensors.values()) - count, count, any(not is_under(name, OUTPUT_LAYERS) for name in trainable),
                    bool(blocks) and not any(name in trainable for name in blocks))


def mixture_views(data_mix: str, data_config: str = "auto") -> int:
    """Cameras side by side in a sample of the mixture (the widest of its data configs): the one count of the
    doctor, the trainer's resource check, the launcher's preflight and the policy server."""
    from DiT4DiT.dataloader.modality import mixture_configs  # imports the data package only here

    return max(len(config.video_keys) for config in mixture_configs(data_mix, data_config))


def measured_bytes(row: dict, video_tokens: float, text_tokens: float, batch: int) -> float:
    """A MEASURED row for `batch` samples of `video_tokens` video and `text_tokens` text tokens."""
    per_sample = row["per_video_token"] * video_tokens + row["per_text_token"] * text_tokens + row["per_sample"]
    return batch * per_sample + row["per_pass"]


def cosmos_block_saved_bytes(hidden: int, video_tokens: int, text_tokens: int, checkpointing: bool,
                             batch: int = 1, frozen: bool = False) -> float:
    """Bytes a video pass saves for backward in one Cosmos block of width `hidden` (bf16 autocast); `frozen`: the
    block's weights are (a checkpointed block keeps its input either way)."""
    if checkpointing:
        row = MEASURED["video_pass_checkpointed_block"]
    else:
        row = MEASURED["video_pass_frozen_block"] if frozen else MEASURED["video_pass_block"]
    return measured_bytes(row, video_tokens, text_tokens, batch) * hidden / MEASURED["hidden"]


def blocks_saved_bytes(hidden: int, video_tokens: int, text_tokens: int, batch: int, frozen: bool, layers: int,
                       recomputed: int) -> float:
    """Bytes a video pass saves for backward in the transformer's `layers` blocks when the first `recomputed` of
    them are checkpointed (trainer.gradient_checkpointing_blocks): those keep their input, the others everything."""
    kept = cosmos_block_saved_bytes(hidden, video_tokens, text_tokens, False, batch, frozen)
    inputs = cosmos_block_saved_bytes(hidden, video_tokens, text_tokens, True, batch, frozen)
    return (layers - recomputed) * kept + recomputed * inputs


def video_passes_with_grad(cosmos: FrameworkCosmos25Section, graph_through_blocks: bool) -> int:
    """Transformer passes per step whose blocks keep a graph for backward: none when nothing at or before the
    blocks trains (frozen blocks still pass the gradient back to a trained patch embedding or text projection),
    the sampled losses' sampler steps, or the one flow-matching pass."""
    if cosmos.training == "action" or not graph_through_blocks:
        return 0
    return cosmos.future_num_inference_steps if cosmos.future_loss_type in SAMPLED_LOSS_TYPES else 1


def action_head_saved_bytes(head: FrameworkActionModelSection, repeated_diffusion_steps: int, video_tokens: int,
                            checkpointing: bool) -> float:
    """Bytes the action head saves for backward per sample (`trainer.repeated_diffusion_steps` copies of it),
    scaled from the MEASURED head by width and layers."""
    width, layers = head_size(head)
    row = MEASURED["action_head_checkpointed" if checkpointing else "action_head"]
    steps = head.future_action_window_size + 2  # the action chunk and the state token
    per_copy = row["per_feature_token"] * video_tokens + row["per_action_token"] * steps + row["per_sample"]
    measured_type, measured_layers = MEASURED_HEAD
    size = width / math.prod(DIT_SIZES[measured_type]) * layers / measured_layers
    return repeated_diffusion_steps * per_copy * size


def activation_bytes(framework: FrameworkSection, trainer: TrainerSection, batch: int, tcfg: dict, vae_base_dim: int,
                     tokens: int, pixels: int, transformer: PartSize, head_frozen: bool, device_kind: str,
                     weight_bytes: int = 2, head_bytes: int = 2) -> float:
    """One micro-batch's peak activation bytes: the prompt embeddings, then the largest of the VAE encode, the
    feature pass, and what the step keeps until its backward (video passes, the action head, one recomputed block).
    `weight_bytes` / `head_bytes`: bytes per element the pipeline's parts / the action head compute in (MEASURED is
    bf16; float32 modules hold twice the bytes); `batch`: datasets.vla_data.per_device_batch_size. Checkpointing:
    trainer.gradient_checkpointing_blocks of the transformer's blocks (blocks_saved_bytes), the action head's with
    trainer.enable_gradient_checkpointing."""
    cosmos, text = framework.cosmos25, framework.cosmos25.max_sequence_length
    hidden, layers = tcfg["num_attention_heads"] * tcfg["attention_head_dim"], tcfg["num_layers"]
    checkpointing = trainer.enable_gradient_checkpointing
    # The stacked text-encoder layers, bf16, held for the whole step (the text projection's input).
    prompts = batch * text * tcfg.get("crossattn_proj_in_channels", tcfg["text_embed_dim"]) * 2

    passes = video_passes_with_grad(cosmos, transformer.graph_through_blocks)
    frozen = transformer.blocks_frozen
    recomputed = checkpointed_block_count(trainer.gradient_checkpointing_blocks, checkpointing, layers)
    outside = MEASURED["video_pass_checkpointed_outside" if recomputed else "video_pass_outside"]
    # The measured text-projection input is the prompts term already counted; the rest scales with the width.
    measured_prompts = batch * text * MEASURED["text_projection_in"] * 2
    rest = max(measured_bytes(outside, tokens, text, batch) - measured_prompts, 0.0) * hidden / MEASURED["hidden"]
    per_pass = blocks_saved_bytes(hidden, tokens, text, batch, frozen, layers, recomputed) + rest
    if device_kind == "npu":  # the kept blocks' copies, and the one block being recomputed
        per_pass += (NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN * hidden * tokens * batch
                     * (layers - recomputed + (1 if recomputed else 0)))
    kept = passes * per_pass
    if recomputed and passes:  # the backward rebuilds one block's activations at a time
        kept += cosmos_block_saved_bytes(hidden, tokens, text, False, batch, frozen)
    kept *= weight_bytes / 2
    if cosmos.training != "video" and not head_frozen:
        kept += (batch * action_head_saved_bytes(framework.action_model, trainer.repeated_diffusion_steps, tokens,
                                                 checkpointing) * head_bytes / 2)
    vae_row = MEASURED["vae_encode_peak_per_pixel"]["video_5_frames" if passes else "condition_frame"]
    vae = batch * pixels * vae_row * vae_base_dim / MEASURED["vae_base_dim"]
    if cosmos.latent_cache:  # the latent store: a step reads the posteriors, no VAE runs
        vae = 0.0
    feature = 0.0
    if cosmos.training != "video":  # the no-grad feature pass, before the video pass
        feature = measured_bytes(MEASURED["feature_pass_peak"], tokens, text, batch) * hidden / MEASURED["hidden"]
    scale = weight_bytes / 2
    return scale * prompts + max(scale * max(vae, feature), kept)


def text_encoder_widths(config: Mapping) -> dict[str, int]:
    """The language model's widths in a text_encoder/config.json (transformers writes them under text_config;
    older files keep them at the top level): hidden, intermediate (MLP), layers, heads."""
    text = {**config, **(config.get("text_config") or {})}
    return {"hidden": text["hidden_size"], "intermediate": text["intermediate_size"],
            "layers": text["num_hidden_layers"], "heads": text["num_attention_heads"]}


def text_encoder_graph_bytes(widths: dict[str, int], batch: int, tokens: int, checkpointing: bool,
                             device_kind: str) -> float:
    """Bytes a trained text encoder keeps for backward (bf16 autocast), from the MEASURED rows scaled to `widths`:
    per layer, the part that follows the width and the MLP's own; the embedding and last norm; checkpointed
    (trainer.text_encoder_gradient_checkpointing), each layer's output plus one layer rebuilt at a time in the
    backward. On a CPU, grouped-query attention keeps its (B, heads, S, S) softmax too."""
    width = widths["hidden"] / MEASURED["text_encoder_hidden"]

    def line(row: dict) -> float:
        per_token = row["per_token"] * width + row.get("per_token_per_mlp_unit", 0.0) * widths["intermediate"]
        squared = row["per_head_per_token_squared_cpu"] * widths["heads"] * tokens**2 if device_kind == "cpu" else 0.0
        return batch * (per_token * tokens + squared + row["per_sample"]) + row["per_pass"]

    if checkpointing:
        layer, outside = MEASURED["text_encoder_checkpointed_layer"], MEASURED["text_encoder_checkpointed_outside"]
    else:
        layer, outside = MEASURED["text_encoder_layer"], MEASURED["text_encoder_outside"]
    graph = widths["layers"] * line(layer) + line(outside)
    return graph + (line(MEASURED["text_encoder_layer"]) if checkpointing else 0.0)


def vae_condition_graph_bytes(batch: int, pixels: int, vae_base_dim: int) -> float:
    """Bytes a trained VAE keeps for backward from encoding each sample's conditioning frame of `pixels` (views
    side by side); scaled by the VAE's width."""
    row = MEASURED["vae_encode_saved_per_pixel"]["condition_frame"]
    return batch * pixels * row * vae_base_dim / MEASURED["vae_base_dim"]


def trained_inputs_bytes(trainer: TrainerSection, batch: int, text_tokens: int, text_widths: dict[str, int] | None,
                         vae_base_dim: int, pixels: int, vae_trains: bool, device_kind: str) -> float:
    """The graphs of a trained text encoder (`text_widths`, None when it is frozen) and VAE (bf16), held from the
    forward's start to its backward."""
    graph = 0.0
    if text_widths is not None:
        graph += text_encoder_graph_bytes(text_widths, batch, text_tokens, trainer.text_encoder_gradient_checkpointing,
                                          device_kind)
    if vae_trains:
        graph += vae_condition_graph_bytes(batch, pixels, vae_base_dim)
    return graph


# ZeRO-2 with offload_optimizer: the fp32 master weights, both moments and the fp32 gradient partition, per trainable
# parameter, in host memory (shared across the processes).
OFFLOADED_BYTES_PER_PARAMETER = 16


def static_bytes(sizes: dict[str, PartSize], zero_stage: int, processes: int, weight_bytes: int,
                 stepped: bool = True, offload_optimizer: bool = False) -> float:
    """Weights, gradients and optimizer state per process (see the module's docstring); before the first step
    (`stepped` false) plain AdamW holds no state and no gradient yet, where DeepSpeed allocated its at prepare."""
    frozen = sum(s.frozen for s in sizes.values())
    trainable = sum(s.trainable for s in sizes.values())
    if zero_stage >= 3:
        gathered = 2 * min(ZERO3_MAX_LIVE_PARAMETERS, frozen + trainable)
        return (2 * frozen + 16 * trainable) / processes + gathered
    if zero_stage >= 1:
        return 2 * frozen + trainable * (4 + (0 if offload_optimizer else 12 / processes))
    # Plain AdamW: weight, gradient, exp_avg and exp_avg_sq, all in the parameter's dtype.
    total = 0.0
    for part, size in sizes.items():
        bytes_per = HEAD_BYTES_WITHOUT_DEEPSPEED if part == "action_model" else weight_bytes
        total += bytes_per * (size.frozen + (4 if stepped else 1) * size.trainable)
    return total


def estimate_training_memory(base_model: Path, framework: FrameworkSection, trainer: TrainerSection,
                             data: DatasetsVlaDataSection, num_processes: int, views: int, *, zero_stage: int = 2,
                             device_kind: str = "npu", offload_optimizer: bool = False) -> Estimate | None:
    """Per-device GiB for a run of these sections on `num_processes` devices with `views` cameras side by side per
    frame, under DeepSpeed ZeRO `zero_stage` (2 or 3; 0: no DeepSpeed, plain AdamW in each process) on a
    `device_kind` device ("npu" adds the fused RoPE's float32 copies; "cuda" or "cpu" does not), or None when the
    snapshot has no safetensors; `offload_optimizer`: ZeRO-2's optimizer state in host memory. Reads checkpointing
    from trainer.enable_gradient_checkpointing (and text_encoder_gradient_checkpointing) and the batch from
    datasets.vla_data.per_device_batch_size."""
    base_model = Path(base_model)
    tensors = {}
    for part in PARTS:
        stored = safetensors_tensor_sizes(base_model / part)
        if stored is None:
            return None
        tensors[part] = stored
    freeze = trainer.freeze_modules
    sizes = {p: part_sizes(t, PARTS[p], freeze) for p, t in tensors.items()}
    head_frozen = is_frozen("action_model", freeze)
    head = action_head_params(framework.action_model)
    sizes["action_model"] = PartSize(head if head_frozen else 0, 0 if head_frozen else head)
    released = (sizes["text_encoder"].trainable == 0 and framework.cosmos25.prompt_cache
                and not trainer.save_full_state_dict)
    processes = max(num_processes, 1)
    weight_bytes = DTYPE_BYTES[framework.cosmos25.torch_dtype]
    # DeepSpeed's bf16 casts the whole model; without it the action head stays float32.
    head_bytes = weight_bytes if zero_stage else HEAD_BYTES_WITHOUT_DEEPSPEED
    running = {p: s for p, s in sizes.items() if p != "text_encoder" or not released}

    tcfg = json.loads((base_model / "transformer" / "config.json").read_text())
    latent_frames = latent_frame_count(data.num_frames)
    side = FRAME_SIDE_MULTIPLE  # one latent patch
    tokens = latent_frames * (data.image_size // side) * (views * data.image_size // side)
    vae_base_dim = json.loads((base_model / "vae" / "config.json").read_text()).get("base_dim", MEASURED["vae_base_dim"])
    text_encoder_trains, vae_trains = sizes["text_encoder"].trainable > 0, sizes["vae"].trainable > 0
    transformer = sizes["transformer"]
    if text_encoder_trains or vae_trains:  # their gradient comes back through the video pass's blocks
        transformer = replace(transformer, graph_through_blocks=True)
    pixels = views * data.image_size**2
    activations = activation_bytes(framework, trainer, data.per_device_batch_size, tcfg, vae_base_dim, tokens,
                                   pixels, transformer, head_frozen, device_kind, weight_bytes, head_bytes)
    text_widths = (text_encoder_widths(json.loads((base_model / "text_encoder" / "config.json").read_text()))
                   if text_encoder_trains else None)
    trained_inputs = weight_bytes / 2 * trained_inputs_bytes(
        trainer, data.per_device_batch_size, framework.cosmos25.max_sequence_length, text_widths, vae_base_dim, pixels,
        vae_trains, device_kind)
    offloaded = zero_stage in (1, 2) and offload_optimizer
    trainable = sum(s.trainable for s in running.values())
    return Estimate(static_gib=static_bytes(running, zero_stage, processes, weight_bytes, True, offloaded) / GIB,
                    activation_gib=(activations + trained_inputs) / GIB, tokens_per_sample=tokens,
                    startup_gib=static_bytes(sizes, zero_stage, processes, weight_bytes, False, offloaded) / GIB,
                    trained_inputs_gib=trained_inputs / GIB,
                    host_offload_gib=OFFLOADED_BYTES_PER_PARAMETER * trainable / processes / GIB if offloaded else 0.0)
