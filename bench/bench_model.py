"""DiT4DiT training-step time with and without the prompt-embedding cache, measured in one run.

    .venv/bin/python bench/bench_model.py [--steps 40] [--batch 2] [--views 3] [--threads 1] [--pipeline DIR]
    python bench/bench_model.py --full-size --device cuda --batch 4 --views 3      # on a GPU host

One model is built (text encoder and VAE frozen, as the launch scripts do) and trained on one fixed batch;
blocks of forward + backward + AdamW steps alternate between the cache on (embeddings filled up front) and
off (the prompt encoded every step, the original's behaviour), so both see the same machine load. Medians,
their ratio and peak memory (process RSS on the CPU, allocator peak on an accelerator) are printed. On an
accelerator a third setting moves the text encoder to the CPU once every instruction is cached.

By default the model is the tiny pipeline (the playground one, or a fresh one in a temporary folder), 32x32 px
per view, 5 frames. --full-size uses random weights at the real sizes instead, built in memory because the
real snapshot is not available offline: the 2B Cosmos transformer, a Cosmos-Reason1-7B-sized text encoder
(28 x 3584), the Wan2.1 VAE and the DiT-B head at RoboTwin dims, bf16, 224 px per view, 512-token prompts.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # runnable without an installed package; reuses the test batches

from fixtures_model import TINY_YAML, make_examples  # noqa: E402

from DiT4DiT.config.schema import load_config  # noqa: E402
from DiT4DiT.model.framework import build_framework  # noqa: E402
from DiT4DiT.model.freezing import freeze_modules  # noqa: E402
from DiT4DiT.model.modules import cosmos_backbone  # noqa: E402
from DiT4DiT.model.modules.cosmos_pipeline import (  # noqa: E402
    COSMOS_2B_TRANSFORMER_CONFIG,
    CosmosComponents,
    PipelineShape,
)
from DiT4DiT.tools.tiny_cosmos import DEFAULT_OUT, build_scheduler, build_tokenizer, write_tiny_pipeline  # noqa: E402

FROZEN = "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"
# Real snapshot: 512 tokens x (28 layers x 3584) features in bf16.
REAL_EMBEDDING_BYTES = 512 * 28 * 3584 * 2

FULL_SIZE_OVERRIDES = [
    "framework.cosmos25.base_model=random-full-size",
    "framework.cosmos25.torch_dtype=bfloat16",
    "framework.cosmos25.extract_layer=17",
    "framework.cosmos25.future_loss_type=flow_matching",
    "framework.cosmos25.conditional_frame_timestep=0.0001",
    "framework.cosmos25.vl_hidden_dim=2048",
    "framework.cosmos25.max_sequence_length=512",
    "datasets.vla_data.video_delta_indices=[0,1,2,3,4,5,6,7,8]",
    "datasets.vla_data.action_video_freq_ratio=2",
    "datasets.vla_data.image_size=224",
]

# Cosmos-Reason1-7B's shape (Qwen2.5-VL-7B): 28 layers x 3584 text, 32-block vision tower.
REASON_7B_TEXT = dict(
    vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
    num_key_value_heads=4, max_position_embeddings=128000, rope_theta=1000000.0,
    rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
)
REASON_7B_VISION = dict(
    depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
    fullatt_block_indexes=[7, 15, 23, 31],
)


def random_full_size_components(device: torch.device) -> CosmosComponents:
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            text_encoder = Qwen2_5_VLForConditionalGeneration(
                Qwen2_5_VLConfig(text_config=REASON_7B_TEXT, vision_config=REASON_7B_VISION)
            ).eval()
            transformer = CosmosTransformer3DModel(**COSMOS_2B_TRANSFORMER_CONFIG)
            vae = AutoencoderKLWan().eval()  # the class defaults are the Wan2.1 VAE
    finally:
        torch.set_default_dtype(default_dtype)
    z_dim = vae.config.z_dim
    return CosmosComponents(
        text_encoder=text_encoder,
        tokenizer=build_tokenizer(),  # any token ids below the vocabulary size do
        transformer=transformer,
        vae=vae,
        scheduler=build_scheduler(),
        latents_mean=torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).float(),
        latents_std=torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).float(),
        vae_scale_factor_temporal=4,
        vae_scale_factor_spatial=8,
    )


@contextlib.contextmanager
def full_size_backbone(device: torch.device):
    """Swap the folder loader for random full-size components (the only substitution in this bench)."""
    shape = PipelineShape(hidden_size=2048, num_blocks=28, temporal_factor=4)
    components = random_full_size_components(device)
    with mock.patch.object(cosmos_backbone, "read_pipeline_shape", lambda folder: shape), mock.patch.object(
        cosmos_backbone, "load_cosmos_components", lambda *args, **kwargs: components
    ):
        yield


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(model, examples, optimizer, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    # As the trainer's step: bf16 autocast around forward and backward on an accelerator.
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type != "cpu"):
        losses = model(examples)
        sum(losses.values()).backward()
    optimizer.step()
    synchronize(device)
    return time.perf_counter() - start


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(model, examples, device: torch.device, steps: int, block: int = 5) -> dict:
    extractor = model.backbone_interface.extractor
    cache = extractor.prompt_cache
    model.cache_prompts([e["lang"] for e in examples])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    settings = {"cache on": cache, "cache off": None}  # None = framework.cosmos25.prompt_cache: false
    times = {name: [] for name in settings}
    peaks = {}

    def run(name: str, count: int) -> None:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times[name].extend(step_seconds(model, examples, optimizer, device) for _ in range(count))
        peaks[name] = max(peaks.get(name, 0.0), peak_memory_mib(device))

    for name, setting in settings.items():  # warm-up
        extractor.prompt_cache = setting
        for _ in range(2):
            step_seconds(model, examples, optimizer, device)
    for _ in range(0, steps, block):
        for name, setting in settings.items():
            extractor.prompt_cache = setting
            run(name, block)
    extractor.prompt_cache = cache
    if device.type != "cpu":
        # With every instruction cached the text encoder is never called, so it can leave the accelerator.
        extractor.text_encoder.to("cpu")
        torch.cuda.empty_cache()
        times["cache on, text encoder on the CPU"] = []
        run("cache on, text encoder on the CPU", steps)
    return {
        "median": {name: statistics.median(t) for name, t in times.items()},
        "peak": peaks,
        "steps": steps,
        "embedding_bytes": cache.nbytes() / len(cache),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="measured steps per setting")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--views", type=int, default=3, help="camera views side by side")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    parser.add_argument("--device", default="cpu", help="torch device to train on, e.g. cpu or cuda")
    parser.add_argument("--full-size", action="store_true", help="random weights at the real model sizes")
    parser.add_argument(
        "--pipeline",
        type=Path,
        default=None,
        help=f"tiny pipeline folder (default: {DEFAULT_OUT} if written, else a fresh one)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.full_size:
            stack.enter_context(full_size_backbone(device))
            cfg = load_config(None, FULL_SIZE_OVERRIDES + [f"trainer.freeze_modules={FROZEN}"])
        else:
            pipeline = args.pipeline or (
                DEFAULT_OUT if (DEFAULT_OUT / "model_index.json").is_file() else write_tiny_pipeline(Path(tmp) / "tiny")
            )
            cfg = load_config(TINY_YAML, [f"framework.cosmos25.base_model={pipeline}"])
        torch.manual_seed(0)
        model = build_framework(cfg).to(device)
        freeze_modules(model, FROZEN)
        examples = make_examples(cfg, batch=args.batch, views=args.views)
        result = measure(model, examples, device, args.steps)

    size = int(cfg.datasets.vla_data.image_size)
    print(f"{'full-size (random weights)' if args.full_size else 'tiny'} DiT4DiT, joint mode, device {device}, "
          f"batch {args.batch}, {args.views} view(s) of {size}x{size}, 5 frames, {result['steps']} steps per setting")
    width = max(len(name) for name in result["median"])
    for name, median in result["median"].items():
        peak = result["peak"][name]
        print(f"  step (fwd+bwd+AdamW), {name:{width}s}: {median * 1e3:8.1f} ms (median), peak {peak:.0f} MiB")
    ratio = result["median"]["cache off"] / result["median"]["cache on"]
    print(f"  ratio cache off / cache on: {ratio:.2f}x")
    print(f"  one cached embedding: {result['embedding_bytes'] / 2**10:.1f} KiB here; real snapshot: "
          f"{REAL_EMBEDDING_BYTES / 2**20:.0f} MiB (512 tokens x 28 layers x 3584, bf16, kept in pinned host memory)")


if __name__ == "__main__":
    main()
