"""Measure, on the CPU, the activation memory of a DiT4DiT training step, and print the table that
DiT4DiT/memory/measured.py holds (MEASURED).

    python -m DiT4DiT.tools.measure_activation_memory              # real width: ~2 min on 2 cores, 2.3 GiB
    python -m DiT4DiT.tools.measure_activation_memory --heads 2    # the same layout at 2 x 128 = 256 wide
    python -m DiT4DiT.tools.measure_activation_memory --parts text_encoder,vae_with_grad   # only those rows

Real components with random weights in bf16, run under bf16 autocast as training runs them:
- Cosmos transformer blocks at the Cosmos-Predict2.5-2B layout (16 heads x 128 = 2048, MLP 4x, AdaLN-LoRA 256,
  cross-attention to 512 text tokens of 1024 projected from 28 x 3584), through our attention processor. Per
  block = (2 blocks) - (1 block); outside = (1 block) - (per block). Each is fitted over two video token counts,
  two text lengths and a batch of 1 or 2: bytes = batch * (a * video_tokens + b * text_tokens + c) + d. Also per
  frozen block (its weights frozen, what comes before trained: the backward still passes through it).
- The action DiT (the robotwin head: DiT-B, 16 layers, features 2048 wide), bf16 weights as DeepSpeed's bf16
  casts them, dropout 0.2 as the original's configs, in training mode.
- The Wan2.1 VAE encoding 5 frames, and the feature pass (no grad): the peak bytes of the tensors they hold at once.
- What the configs that train everything add (trainer.freeze_modules ''): the text encoder run with grad every step
  (a Qwen2.5-VL language model at the real width, hidden 3584, MLP 18944, 28 heads / 4 KV heads, built from its
  config with 1 and 2 layers, random bf16 weights, through `embed_token_ids` as the backbone calls it), per token per
  layer, fitted over two MLP widths so that a thin encoder's figure follows its own width; plain and with its layers
  checkpointed. And the VAE encode with grad (what autograd keeps of it), per pixel, for the conditioning frame
  (what `clip_encoding.encode_clip` runs with grad) and a 5-frame clip.

Two counters, both independent of any allocator:
- saved for backward: torch.autograd.graph.saved_tensors_hooks sees every tensor autograd keeps; each storage
  is counted once (views and tensors shared between blocks are one storage), parameters left out.
- peak while running (no grad): a dispatch mode follows each storage an operator creates until it is freed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from DiT4DiT.errors import run_main
from DiT4DiT.facts import PATCH_SIZE
from DiT4DiT.memory.measured import Row
from DiT4DiT.model.modules.activation_checkpointing import checkpointed
from DiT4DiT.model.modules.cosmos_backbone import use_our_attention
from DiT4DiT.tools.synthetic_inputs import transformer_inputs
from DiT4DiT.base_model.cosmos_2b import TRANSFORMER_CONFIG as COSMOS_2B_TRANSFORMER_CONFIG

# Shapes measured at: robotwin's 3 views of 224 px and 2 latent frames (1,176 tokens), its 512-token prompts, and
# half of each, to separate the parts that grow with video tokens from those that grow with text tokens.
VIDEO_SHAPES = ((2, 14, 42), (2, 14, 21))  # (latent frames, patches high, patches wide)
TEXT_TOKENS = (512, 256)
HEAD_SHAPES = ((1176, 8), (588, 8), (1176, 16))  # (feature tokens, action steps)
DROPOUT = 0.2  # the original's LIBERO, RoboCasa and G1 action heads
ROBOTWIN_YAML = Path(__file__).resolve().parents[1] / "config" / "robotwin" / "dit4dit_robotwin.yaml"


def progress(message: str) -> None:
    """One line on stderr with the process's peak RSS so far (the tool is meant to stay within a few GB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
    print(f"{message} (peak RSS {peak:.2f} GiB)", file=sys.stderr, flush=True)


def storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def saved_for_backward_bytes(run, exclude=()) -> tuple[int, object]:
    """(bytes of the distinct storages autograd saves while `run()` records its graph, run's result); storages of
    `exclude` (the parameters) are left out. The storages are held until counted, so no address is reused."""
    excluded = {storage_key(t) for t in exclude}
    saved: dict[int, torch.UntypedStorage] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded and storage.nbytes():
            saved[storage.data_ptr()] = storage
        # Detached: a saved output handed back as itself would hold its own grad_fn, a cycle gc cannot break.
        return tensor.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = run()
    return sum(s.nbytes() for s in saved.values()), result


class PeakLiveBytes(TorchDispatchMode):
    """Peak bytes of the storages created inside the mode that are alive at once (inputs and weights made
    before it are not counted)."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.live = {key: (ref, size) for key, (ref, size) in self.live.items() if not ref.expired()}
        out = func(*args, **(kwargs or {}))
        # Views and in-place results share an argument's storage: nothing new is allocated.
        shared = {storage_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if (isinstance(tensor, torch.Tensor) and tensor.untyped_storage().nbytes()
                    and storage_key(tensor) not in shared):
                ref = StorageWeakRef(tensor.untyped_storage())
                self.live.setdefault(ref.cdata, (ref, tensor.untyped_storage().nbytes()))
        self.peak = max(self.peak, sum(size for _, size in self.live.values()))
        return out


def peak_live_bytes(run) -> int:
    with PeakLiveBytes() as mode:
        run()
    return mode.peak


@dataclass
class Linear:
    """bytes = batch * (per_video_token * video_tokens + per_text_token * text_tokens + per_sample) + per_pass."""

    per_video_token: float
    per_text_token: float
    per_sample: float
    per_pass: float


def fit(measure) -> Linear:
    """`measure(batch, video_shape, text_tokens)` -> bytes, fitted over VIDEO_SHAPES x TEXT_TOKENS and a batch of
    1 or 2 (four points; the batch of 2 at the smaller shape, to stay within a few GB)."""
    tokens = [frames * h * w for frames, h, w in VIDEO_SHAPES]
    base = measure(1, VIDEO_SHAPES[0], TEXT_TOKENS[0])
    smaller = measure(1, VIDEO_SHAPES[1], TEXT_TOKENS[0])
    per_video = (base - smaller) / (tokens[0] - tokens[1])
    per_text = (base - measure(1, VIDEO_SHAPES[0], TEXT_TOKENS[1])) / (TEXT_TOKENS[0] - TEXT_TOKENS[1])
    one_sample = measure(2, VIDEO_SHAPES[1], TEXT_TOKENS[0]) - smaller
    per_sample = one_sample - per_video * tokens[1] - per_text * TEXT_TOKENS[0]
    return Linear(per_video, per_text, per_sample, smaller - one_sample)


@contextlib.contextmanager
def built_in_bf16():
    """Modules made inside get bf16 weights from the start (no float32 copy of the weights in memory)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        yield
    finally:
        torch.set_default_dtype(default)


def cosmos_transformer(heads: int, blocks: int = 2, text_projection: bool = True) -> torch.nn.Module:
    """The 2B transformer's layout with `heads` heads of 128 and `blocks` blocks, random bf16 weights; without
    `text_projection` the text arrives projected (1024 wide), which changes nothing inside the blocks."""
    from diffusers import CosmosTransformer3DModel

    torch.manual_seed(0)
    config = {**COSMOS_2B_TRANSFORMER_CONFIG, "num_attention_heads": heads, "num_layers": blocks,
              "use_crossattn_projection": text_projection}
    with built_in_bf16():
        transformer = CosmosTransformer3DModel(**config).train()
    use_our_attention(transformer)
    return transformer


def video_inputs(transformer, batch: int, video_shape, text_tokens: int) -> dict:
    """Inputs as the backbone gives them for `video_shape` (latent frames, patches high, patches wide), in bf16."""
    frames, high, wide = video_shape
    return transformer_inputs(transformer.config, batch, frames, high * PATCH_SIZE, wide * PATCH_SIZE, text_tokens,
                              dtype=torch.bfloat16)


@contextlib.contextmanager
def first_blocks(transformer, count: int):
    """The transformer running only its first `count` blocks."""
    blocks = transformer.transformer_blocks
    transformer.transformer_blocks = blocks[:count]
    try:
        yield
    finally:
        transformer.transformer_blocks = blocks


@contextlib.contextmanager
def blocks_frozen(transformer, frozen: bool):
    """The transformer's blocks frozen (what comes before them still trains, so the backward passes through them:
    a frozen linear layer saves no input, only what the gradient to that input needs)."""
    params = list(transformer.transformer_blocks.parameters())
    for p in params:
        p.requires_grad_(not frozen)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def cosmos_saved_bytes(transformer, blocks: int, batch: int, video_shape, text_tokens: int, checkpointing: bool,
                       frozen: bool = False) -> int:
    """Bytes saved for backward by a video pass through the first `blocks` blocks (`frozen`: their weights)."""
    inputs = video_inputs(transformer, batch, video_shape, text_tokens)
    if checkpointing:
        transformer.enable_gradient_checkpointing(checkpointed)
    else:
        transformer.disable_gradient_checkpointing()
    with (first_blocks(transformer, blocks), blocks_frozen(transformer, frozen),
          torch.autocast("cpu", dtype=torch.bfloat16)):
        saved, _ = saved_for_backward_bytes(lambda: transformer(**inputs), exclude=transformer.parameters())
    progress(f"video pass, {blocks} {'frozen ' if frozen else ''}block(s), batch {batch}, {video_shape}, "
             f"{text_tokens} text tokens, checkpointing {checkpointing}: {saved / 2**20:.1f} MiB saved")
    return saved


def cosmos_block_figures(transformer, checkpointing: bool, frozen: bool = False) -> dict[str, Linear]:
    """{'block': one more block, 'outside': the rest (embeddings, text projection, output layer)}."""
    one, two = (fit(lambda batch, shape, text, blocks=blocks: cosmos_saved_bytes(
        transformer, blocks, batch, shape, text, checkpointing, frozen)) for blocks in (1, 2))
    block = Linear(*(b - a for a, b in zip(vars(one).values(), vars(two).values())))
    outside = Linear(*(a - b for a, b in zip(vars(one).values(), vars(block).values())))
    return {"block": block, "outside": outside}


def feature_pass_peak(transformer) -> Linear:
    """Peak bytes held at once by a no-grad pass through 2 blocks (the feature pass keeps no graph)."""

    def measure(batch: int, shape, text: int) -> int:
        inputs = video_inputs(transformer, batch, shape, text)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            peak = peak_live_bytes(lambda: transformer(**inputs))
        progress(f"feature pass, batch {batch}, {shape}, {text} text tokens: peak {peak / 2**20:.1f} MiB")
        return peak

    return fit(measure)


def action_head_figures(checkpointing: bool) -> dict[str, float]:
    """Bytes saved by the robotwin action head per repeated sample: per feature token, per action token (the
    state token included), and per sample."""
    from DiT4DiT.config.schema import load_config
    from DiT4DiT.model.modules.action_model.flow_matching_head import build_action_head

    cfg = load_config(ROBOTWIN_YAML, [f"framework.action_model.diffusion_model_cfg.dropout={DROPOUT}"])
    action_cfg = cfg.framework.action_model
    torch.manual_seed(0)
    with built_in_bf16():
        head = build_action_head(action_cfg, feature_dim=2048, gradient_checkpointing=checkpointing).train()

    def measure(features: int, steps: int) -> int:
        vl = torch.randn(1, features, 2048, dtype=torch.bfloat16)
        actions = torch.randn(1, steps, action_cfg.action_dim, dtype=torch.bfloat16)
        state = torch.randn(1, 1, action_cfg.state_dim, dtype=torch.bfloat16)
        mask = torch.ones(1, steps, action_cfg.action_dim, dtype=torch.bool)
        saved, _ = saved_for_backward_bytes(lambda: head(vl, actions, mask, state), exclude=head.parameters())
        progress(f"action head, {features} feature tokens, {steps} action steps, checkpointing {checkpointing}: "
                 f"{saved / 2**20:.1f} MiB saved")
        return saved

    (f0, s0), (f1, _), (_, s2) = HEAD_SHAPES
    base = measure(f0, s0)
    per_feature = (base - measure(f1, s0)) / (f0 - f1)
    per_action = (measure(f0, s2) - base) / (s2 - s0)
    return {"per_feature_token": per_feature, "per_action_token": per_action,
            "per_sample": base - per_feature * f0 - per_action * (s0 + 1)}


def vae_encode_peak() -> tuple[int, dict[str, float]]:
    """(the VAE's base width, peak bytes held at once per pixel (of one frame, all views side by side) by the
    Wan2.1 VAE encoding one sample's 5 frames, and its conditioning frame, with no grad)."""
    vae = wan_vae()
    figures = {}
    for name, frames in (("video_5_frames", 5), ("condition_frame", 1)):
        per_pixel = []
        for wide in (224, 448):
            video = torch.rand(1, 3, frames, 224, wide, dtype=torch.bfloat16) * 2 - 1
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                peak = peak_live_bytes(lambda: vae.encode(video).latent_dist.mode())
            progress(f"VAE encode, {frames} frame(s) of 224 x {wide}: peak {peak / 2**20:.1f} MiB")
            per_pixel.append(peak / (224 * wide))
        figures[name] = round(max(per_pixel), 1)
    return vae.config.base_dim, figures


def vae_encode_saved() -> tuple[int, dict[str, float]]:
    """(the VAE's base width, bytes autograd keeps per pixel (of one frame, all views side by side) when the Wan2.1
    VAE encodes, with its weights trained, a sample's conditioning frame (as clip_encoding.encode_clip does: the
    posterior sampled) and a 5-frame clip); the larger of two widths."""
    vae = wan_vae()
    figures = {}
    for name, frames in (("condition_frame", 1), ("video_5_frames", 5)):
        per_pixel = []
        for wide in (224, 448):
            per_pixel.append(vae_saved_bytes(vae, 1, frames, 224, wide) / (224 * wide))
        figures[name] = round(max(per_pixel), 1)
    return vae.config.base_dim, figures


def wan_vae(**config) -> torch.nn.Module:
    """The Wan2.1 VAE (the class defaults; `config` overrides them), random bf16 weights."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    with built_in_bf16():
        return AutoencoderKLWan(**config).eval()


def vae_saved_bytes(vae, batch: int, frames: int, high: int, wide: int) -> int:
    """Bytes saved for backward by encoding `batch` clips of `frames` frames of high x wide with the VAE's weights
    trained (bf16 autocast), the posterior sampled."""
    video = torch.rand(batch, 3, frames, high, wide, dtype=torch.bfloat16) * 2 - 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        saved, _ = saved_for_backward_bytes(lambda: vae.encode(video).latent_dist.sample(), exclude=vae.parameters())
    progress(f"VAE encode with grad, {batch} x {frames} frame(s) of {high} x {wide}: {saved / 2**20:.1f} MiB saved")
    return saved


# The text encoder of the real snapshot (Cosmos-Reason1-7B's language model), the layout the rows are measured at.
TEXT_ENCODER_WIDTHS = {"hidden": 3584, "intermediate": 18944, "heads": 28, "kv_heads": 4}
THIN_INTERMEDIATE = 256  # the second MLP width of the fit (the thin snapshot's)
TEXT_TOKENS_FIT = (512, 256, 128)


def qwen_text_encoder(layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int) -> torch.nn.Module:
    """A Qwen2.5-VL text encoder built from its config: `layers` layers of the given widths (heads of 128 as the
    real one's), a small vocabulary and vision tower (prompts carry no image), random bf16 weights, in training
    mode; as the pipeline loads it (attention through SDPA)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from DiT4DiT.base_model.cosmos_2b import TEXT_CONFIG, VISION_CONFIG
    from DiT4DiT.tools.full_size_cosmos import THIN_VISION

    text = {**TEXT_CONFIG, "vocab_size": 1024, "hidden_size": hidden, "intermediate_size": intermediate,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    config = Qwen2_5_VLConfig(text_config=text, vision_config={**VISION_CONFIG, **THIN_VISION, "out_hidden_size": hidden})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with built_in_bf16():
        return Qwen2_5_VLForConditionalGeneration(config).train()


def text_encoder_saved_bytes(encoder, batch: int, tokens: int, checkpointing: bool) -> int:
    """Bytes saved for backward by embedding `batch` prompts of `tokens` tokens with the encoder trained (bf16
    autocast), through the backbone's embed_token_ids; `checkpointing`: its layers checkpointed."""
    from DiT4DiT.model.modules.prompt_encoding import checkpoint_text_encoder_layers, embed_token_ids

    if checkpointing:
        checkpoint_text_encoder_layers(encoder)
    else:
        encoder.gradient_checkpointing_disable()
    ids = torch.randint(0, encoder.config.text_config.vocab_size, (batch, tokens))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        saved, _ = saved_for_backward_bytes(lambda: embed_token_ids(encoder, ids), exclude=encoder.parameters())
    text = encoder.config.text_config
    progress(f"text encoder, {text.num_hidden_layers} layer(s) of {text.hidden_size} (MLP {text.intermediate_size}), "
             f"batch {batch}, {tokens} tokens, checkpointing {checkpointing}: {saved / 2**20:.1f} MiB saved")
    return saved


def token_fit(values: dict, heads: int) -> dict[str, float]:
    """bytes = batch * (per_token * S + per_head_per_token_squared * heads * S^2 + per_sample) + per_pass, from
    {(batch, S): bytes} at S = TEXT_TOKENS_FIT (batch 1) and (2, the middle S). The S^2 term is the CPU's: it runs
    grouped-query attention (enable_gqa) by the math path, which keeps the (B, heads, S, S) softmax; the NPU's
    fused attention and CUDA's flash kernel keep (B, heads, S) statistics."""
    long, middle, short = TEXT_TOKENS_FIT
    y1, y2, y3 = (values[1, s] for s in TEXT_TOKENS_FIT)
    # y = a S^2 + b S + c through the three points (divided differences).
    slope_high, slope_low = (y1 - y2) / (long - middle), (y2 - y3) / (middle - short)
    a = (slope_high - slope_low) / (long - short)
    b = slope_high - a * (long + middle)
    one_sample = values[2, middle] - values[1, middle]
    per_sample = one_sample - a * middle**2 - b * middle
    return {"per_token": b, "per_head_per_token_squared_cpu": a / heads, "per_sample": per_sample,
            "per_pass": values[1, middle] - one_sample}


def text_encoder_figures(checkpointing: bool, widths: dict = TEXT_ENCODER_WIDTHS) -> dict[str, dict[str, float]]:
    """{'layer': bytes per layer, 'outside': the rest (embedding, last norm)}, each as token_fit's line, the layer's
    per_token split into per_token + per_token_per_mlp_unit * intermediate. Per layer = (2 layers) - (1 layer); the
    MLP term from the real MLP width against the thin one (at the longest prompt)."""
    long, middle, _ = TEXT_TOKENS_FIT
    full, thin = widths["intermediate"], THIN_INTERMEDIATE
    points = {}  # (layers, intermediate) -> {(batch, tokens): bytes}
    for intermediate in (full, thin):
        shapes = ([(1, s) for s in TEXT_TOKENS_FIT] + [(2, middle)]) if intermediate == full else [(1, long)]
        for layers in (1, 2):
            encoder = qwen_text_encoder(layers, widths["hidden"], intermediate, widths["heads"], widths["kv_heads"])
            points[layers, intermediate] = {shape: text_encoder_saved_bytes(encoder, *shape, checkpointing)
                                            for shape in shapes}
            del encoder
    one, two = points[1, full], points[2, full]
    layer = token_fit({shape: two[shape] - one[shape] for shape in one}, widths["heads"])
    outside = token_fit({shape: 2 * one[shape] - two[shape] for shape in one}, widths["heads"])
    thin_layer = points[2, thin][1, long] - points[1, thin][1, long]
    per_mlp_unit = ((two[1, long] - one[1, long]) - thin_layer) / (long * (full - thin))
    layer = {**layer, "per_token": layer["per_token"] - per_mlp_unit * full, "per_token_per_mlp_unit": per_mlp_unit}
    return {"layer": layer, "outside": outside}


PARTS = ("cosmos", "action_head", "vae", "text_encoder", "vae_with_grad")


def measure_all(heads: int, parts: tuple[str, ...] = PARTS) -> dict[str, int | Row]:
    """The table at `heads` x 128 wide, in bytes (per video token, per text token, per sample, per pass), as
    MEASURED in DiT4DiT/memory/measured.py holds it; `parts`: the rows to measure (the others are left out)."""
    table: dict[str, int | Row] = {}  # the widths and the rows asked for: a part of a Measured
    if "cosmos" in parts:
        transformer = cosmos_transformer(heads)
        table.update(hidden=heads * 128, text_projection_in=transformer.config.crossattn_proj_in_channels)
        for name, checkpointing in (("video_pass", False), ("video_pass_checkpointed", True)):
            for part, line in cosmos_block_figures(transformer, checkpointing).items():
                table[f"{name}_{part}"] = rounded(vars(line))
        table["video_pass_frozen_block"] = rounded(vars(cosmos_block_figures(transformer, False, frozen=True)["block"]))
        transformer.disable_gradient_checkpointing()
        table["feature_pass_peak"] = rounded(vars(feature_pass_peak(transformer)))
        del transformer
    if "action_head" in parts:
        for name, checkpointing in (("action_head", False), ("action_head_checkpointed", True)):
            table[name] = rounded(action_head_figures(checkpointing))
    if "vae" in parts:
        table["vae_base_dim"], table["vae_encode_peak_per_pixel"] = vae_encode_peak()
    if "vae_with_grad" in parts:
        table["vae_base_dim"], table["vae_encode_saved_per_pixel"] = vae_encode_saved()
    if "text_encoder" in parts:
        table["text_encoder_hidden"] = TEXT_ENCODER_WIDTHS["hidden"]
        for name, checkpointing in (("text_encoder", False), ("text_encoder_checkpointed", True)):
            figures = text_encoder_figures(checkpointing)
            table[f"{name}_layer"], table[f"{name}_outside"] = (rounded(figures[key]) for key in ("layer", "outside"))
    return table


def rounded(figures: dict[str, float]) -> dict[str, float]:
    return {key: round(value, 1) for key, value in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heads", type=int, default=COSMOS_2B_TRANSFORMER_CONFIG["num_attention_heads"],
                        help="attention heads of 128 (16: the real 2048 width)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"rows to measure, of {', '.join(PARTS)} (default all)")
    args = parser.parse_args()
    parts = tuple(part for part in args.parts.split(",") if part)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts {args.parts}: {', '.join(unknown)} is not one of {', '.join(PARTS)}")
    torch.set_num_threads(args.threads)
    start = time.monotonic()
    table = measure_all(args.heads, parts)
    print(json.dumps(table, indent=1))
    print(f"# bytes per sample; measured in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(run_main(main))
