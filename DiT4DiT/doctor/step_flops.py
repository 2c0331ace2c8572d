"""FLOPs of one training step, counted from the model as configured: the snapshot's config.json files (transformer,
VAE, text encoder) and the config's framework, trainer and data sections. What MFU divides by (bench/device_check.py)
and what the doctor's time plan multiplies out (seconds per step, hours for trainer.max_train_steps).

Model FLOPs, 2 per multiply-add of every matmul and convolution, as the step runs them: the feature pass (forward
through block extract_layer, no grad), the video loss's transformer pass (forward; backward 2x the forward where the
blocks train, 1x where they are frozen but the gradient passes through them to what trains before them), the VAE's
one call on the clip (clip_encoding.py; on the conditioning frame alone in action mode; none with the latent store)
and, where the VAE trains, the conditioning frame's encoding with grad, the action head's forward and backward for
each of trainer.repeated_diffusion_steps copies, and the text encoder where it runs every step (trained, or the
prompt store off). Not counted: norms, activations and optimizer arithmetic (a fraction of a percent here), the
recomputation of checkpointed blocks (hardware FLOPs, not model FLOPs: MFU leaves it out), and a pixel loss's VAE
decode. torch's FlopCounterMode is no substitute on an NPU: it has no formula for torch_npu's `matmul_backward`, so
it misses the backward of bias-free linear layers and reads about half (ASCEND_NOTES §12).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkActionModelSection, FrameworkSection, TrainerSection
from DiT4DiT.facts import SAMPLED_LOSS_TYPES, VAE_SPATIAL_FACTOR, latent_frame_count, vae_clip_frames
from DiT4DiT.memory.estimate import PARTS, head_size, is_frozen, text_encoder_widths

# bf16 dense peak TFLOPS per device (one GPU, one NPU die), matched in order against the device name.
# NVIDIA: H100/H200 SXM datasheets give 1,979 TFLOPS bf16 "with sparsity", i.e. 989 dense; H100 PCIe 756 dense
# (1,513 sparse); A100 datasheet 312 dense. Ascend: no Huawei datasheet was found; 910B (Atlas A2) uses verl's
# 354 (volcengine/verl verl/utils/flops_counter.py); the A3 die (Ascend910_93xx) is half of the 752 TFLOPS
# dense bf16 per 910C package in the CloudMatrix384 paper (arXiv 2506.12708), i.e. 376.
PEAK_TFLOPS = (
    ("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0),
    ("910_93", 376.0), ("910B", 354.0),
)
# The doctor's time plan: the devices it projects for, by the name PEAK_TFLOPS matches.
PLANNED_DEVICES = {"A3 die": "Ascend910_93", "A2": "Ascend910B", "H200": "H200"}
# Modules of the Cosmos transformer before its blocks: training one keeps the video pass's graph through the blocks.
BEFORE_BLOCKS = ("patch_embed", "learnable_pos_embed", "time_embed", "crossattn_proj")


def peak_tflops(name: str) -> float | None:
    return next((peak for key, peak in PEAK_TFLOPS if key.lower() in name.lower()), None)


def planned_peak_tflops(label: str) -> float:
    """Peak TFLOPS of a device the time plan projects for (a PLANNED_DEVICES label)."""
    peak = peak_tflops(PLANNED_DEVICES[label])
    assert peak is not None, label  # each planned device is named as PEAK_TFLOPS matches it
    return peak


def transformer_forward_flops(config: Mapping, batch: int, latent_frames: int, height: int, width: int,
                              text_tokens: int, blocks: int) -> dict[str, int]:
    """Matmul FLOPs of one Cosmos transformer forward through `blocks` blocks, for latents of `height` x `width`:
    "linear" (QKV/out of both attentions, the MLP, the AdaLN-LoRA modulations, the patch embedding, the text
    projection, the output layer) and "attention" (scores and values, self over the N video tokens, cross over the
    text tokens). `config`: the transformer's config.json."""
    d = config["num_attention_heads"] * config["attention_head_dim"]
    c, lora = config["text_embed_dim"], config["adaln_lora_dim"]
    p_t, p_h, p_w = config["patch_size"]
    per_sample = (latent_frames // p_t) * (height // p_h) * (width // p_w)
    n, text = batch * per_sample, batch * text_tokens
    # Per block: self-attention q, k, v, out; cross-attention q, out and k, v over the text; the MLP; three
    # AdaLN-LoRA modulations (d -> lora -> 3d) per token.
    block = 8 * n * d * d + 4 * n * d * d + 4 * text * c * d + 4 * n * d * int(config["mlp_ratio"] * d)
    block += 3 * 2 * n * (d * lora + lora * 3 * d)
    patch_in = (config["in_channels"] + int(config["concat_padding_mask"])) * p_t * p_h * p_w
    linear = blocks * block + 2 * n * patch_in * d + 2 * n * d * p_t * p_h * p_w * config["out_channels"]
    if config.get("use_crossattn_projection"):
        linear += 2 * text * config["crossattn_proj_in_channels"] * config["encoder_hidden_states_channels"]
    attention = blocks * (4 * batch * per_sample**2 * d + 4 * batch * per_sample * text_tokens * d)
    return {"linear": linear, "attention": attention}


def vae_encode_flops(config: Mapping, batch: int, frames: int, height: int, width: int) -> int:
    """Convolution and attention FLOPs of the Wan VAE encoding `batch` clips of `frames` frames (1 + 4k) of height x
    width (diffusers' AutoencoderKLWan: causal 3x3x3 convolutions, a 2x2 spatial downsample after each level but the
    last, a stride-2 causal time convolution where temperal_downsample says, one single-head attention per frame in
    the middle). `config`: the VAE's config.json."""
    dims = [config["base_dim"] * m for m in [1, *config["dim_mult"]]]
    z2 = 2 * config["z_dim"]
    pixels, t = height * width, frames
    total = 2 * 27 * 3 * dims[0] * pixels * t  # conv_in

    def residual(cin: int, cout: int) -> int:
        return 2 * 27 * cin * cout * pixels * t + 2 * 27 * cout * cout * pixels * t + (
            2 * cin * cout * pixels * t if cin != cout else 0)

    levels = len(config["dim_mult"])
    for level, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        for block in range(config["num_res_blocks"]):
            total += residual(cin if block == 0 else cout, cout)
        if level != levels - 1:
            pixels //= 4
            total += 2 * 9 * cout * cout * pixels * t  # the stride-2 Conv2d on every frame
            if config["temperal_downsample"][level]:
                t = 1 + (t - 1) // 2  # the first frame kept, each later pair of frames one (kernel 3 in time)
                total += 2 * 3 * cout * cout * pixels * (t - 1)
    mid = dims[-1]
    total += 2 * residual(mid, mid)
    total += t * (2 * mid * 3 * mid * pixels + 4 * pixels * pixels * mid + 2 * mid * mid * pixels)  # attention
    total += 2 * 27 * mid * z2 * pixels * t + 2 * z2 * z2 * pixels * t  # conv_out, quant_conv
    return batch * total


def action_head_forward_flops(head: FrameworkActionModelSection, batch: int, feature_tokens: int,
                              feature_dim: int) -> dict[str, int]:
    """Matmul FLOPs of one pass of the flow-matching action head for `batch` samples: "features" (the cross-attention
    keys and values over the backbone's features, whose input needs no gradient) and "rest"."""
    d, layers = head_size(head)
    dit = head.diffusion_model_cfg
    steps = head.chunk_length
    tokens = steps + (1 if head.state_dim else 0)
    cross_layers = sum(1 for i in range(layers) if not (dit.interleave_self_attention and i % 2 == 1))
    self_layers = layers - cross_layers
    features = cross_layers * 2 * 2 * feature_tokens * feature_dim * d
    rest = cross_layers * (2 * 2 * tokens * d * d + 4 * tokens * feature_tokens * d)
    rest += self_layers * (4 * 2 * tokens * d * d + 4 * tokens * tokens * d)
    rest += layers * (2 * 2 * tokens * d * 4 * d + 2 * d * 2 * d)  # feed-forward (4x), AdaLN from the time embedding
    hidden = head.hidden_size
    rest += 2 * steps * (head.action_dim * d + 2 * d * d + d * d)  # action encoder
    rest += 2 * (head.state_dim * hidden + hidden * d) if head.state_dim else 0  # state encoder
    rest += 2 * d * 2 * d + 2 * tokens * d * dit.output_dim  # output modulation and projection
    rest += 2 * tokens * (dit.output_dim * hidden + hidden * head.action_dim)  # action decoder
    return {"features": batch * features, "rest": batch * rest}


def text_encoder_forward_flops(widths: Mapping, batch: int, tokens: int, kv_heads: int) -> dict[str, int]:
    """Matmul FLOPs of the Qwen2.5-VL language model embedding `batch` prompts of `tokens` tokens (no lm_head, as the
    backbone runs it): "linear" (q and o over the width, k and v over the key-value heads, the gated MLP) and
    "attention" (causal: half the scores and values a full square would need)."""
    h, mlp, layers = widths["hidden"], widths["intermediate"], widths["layers"]
    kv = kv_heads * h // widths["heads"]
    linear = 2 * tokens * (2 * h * h + 2 * h * kv + 3 * h * mlp)
    return {"linear": batch * layers * linear, "attention": batch * layers * 2 * tokens * tokens * h}


@dataclass(frozen=True)
class StepFlops:
    """Model FLOPs of one micro-batch (forward and backward), per part, and what recomputation adds."""

    parts: dict[str, float]
    recomputed: float = 0.0  # checkpointed blocks run their forward again in the backward (hardware FLOPs)

    @property
    def total(self) -> float:
        return sum(self.parts.values())


def snapshot_configs(base_model: Path) -> tuple[dict, dict, dict]:
    """The transformer's, VAE's and text encoder's config.json of a snapshot."""
    return tuple(json.loads((Path(base_model) / part / "config.json").read_text())
                 for part in ("transformer", "vae", "text_encoder"))


def training_step_flops(transformer: Mapping, vae: Mapping, text_encoder: Mapping, framework: FrameworkSection,
                        trainer: TrainerSection, data: DatasetsVlaDataSection, views: int, batch: int) -> StepFlops:
    """One micro-batch of `batch` samples of `views` cameras side by side, as the config trains it (see the module's
    docstring); the three mappings are the components' config.json."""
    cosmos, freeze = framework.cosmos25, trainer.freeze_modules
    frames = data.num_frames
    latent_frames = latent_frame_count(frames)
    side = data.image_size // VAE_SPATIAL_FACTOR  # the latent's side
    shape = dict(batch=batch, latent_frames=latent_frames, height=side, width=side * views,
                 text_tokens=cosmos.max_sequence_length)
    text_trains, vae_trains = (not is_frozen(PARTS[part], freeze) for part in ("text_encoder", "vae"))
    blocks_train = not is_frozen(f"{PARTS['transformer']}.transformer_blocks", freeze)
    before_trains = any(not is_frozen(f"{PARTS['transformer']}.{name}", freeze) for name in BEFORE_BLOCKS)
    parts: dict[str, float] = {}
    recomputed = 0.0
    if cosmos.training != "video":  # the no-grad feature pass, stopped after block extract_layer
        parts["transformer feature pass"] = sum(transformer_forward_flops(
            transformer, blocks=cosmos.extract_layer + 1, **shape).values())
    if cosmos.training != "action":
        passes = cosmos.future_num_inference_steps if cosmos.future_loss_type in SAMPLED_LOSS_TYPES else 1
        forward = passes * sum(transformer_forward_flops(transformer, blocks=transformer["num_layers"], **shape).values())
        backward = 2 if blocks_train else 1 if (before_trains or text_trains or vae_trains) else 0
        parts["transformer video pass"] = (1 + backward) * forward
        if trainer.enable_gradient_checkpointing and backward:
            recomputed += forward
    # One call on the clip (the video loss's targets and the conditioning frame's posterior; the Wan VAE is causal);
    # a trained VAE gets its gradient through the conditioning frame, encoded again on its own with grad.
    if not cosmos.latent_cache:
        clip = 1 if cosmos.training == "action" else vae_clip_frames(frames)
        encode = functools.partial(vae_encode_flops, vae, batch, height=data.image_size,
                                   width=data.image_size * views)
        parts["VAE encode"] = 3 * encode(1) + (encode(clip) if clip > 1 else 0) if vae_trains else encode(clip)
    head_frozen = is_frozen("action_model", freeze)
    if cosmos.training != "video":
        head = action_head_forward_flops(framework.action_model, batch, shape["latent_frames"]
                                         * (shape["height"] // 2) * (shape["width"] // 2), cosmos.vl_hidden_dim)
        copies = trainer.repeated_diffusion_steps
        # The features need no gradient: their projection's backward is the weight gradient alone.
        parts["action head"] = copies * (head["rest"] * (1 if head_frozen else 3)
                                         + head["features"] * (1 if head_frozen else 2))
        if trainer.enable_gradient_checkpointing and not head_frozen:
            recomputed += copies * sum(head.values())
    if text_trains or not cosmos.prompt_cache:  # else the prompt store holds every embedding
        text = {**text_encoder, **(text_encoder.get("text_config") or {})}
        forward = sum(text_encoder_forward_flops(text_encoder_widths(text_encoder), batch, cosmos.max_sequence_length,
                                                 text["num_key_value_heads"]).values())
        parts["text encoder"] = forward * (3 if text_trains else 1)
        if text_trains and trainer.text_encoder_gradient_checkpointing:
            recomputed += forward
    return StepFlops(parts, recomputed)
