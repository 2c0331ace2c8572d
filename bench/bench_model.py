"""DiT4DiT training-step time with and without the prompt-embedding store and the early-exit feature pass.

    .venv/bin/python bench/bench_model.py [--steps 40] [--batch 2] [--views 3] [--threads 1] [--pipeline DIR]
    .venv/bin/python bench/bench_model.py --deep 12 --views 1 --steps 10 [--mode action]   # early-exit gain
    python bench/bench_model.py --full-size --device cuda --batch 4 --views 3      # on a GPU host

One model is built (text encoder and VAE frozen, as the launch scripts do) and trained on one fixed batch;
blocks of forward + backward + AdamW steps alternate between the settings so all see the same machine load:
the store on (embeddings stored up front, memory-mapped) and off (the prompt encoded every step, the original's
behaviour), and the feature pass stopping after block extract_layer or running every block (the original).
The feature pass alone (features only, no grad) is timed both ways too. Medians, their ratios and peak memory
(process RSS on the CPU, allocator peak on an accelerator) are printed. On an accelerator a last setting runs
with the text encoder released, as training does once every instruction is stored.

By default the model is the tiny pipeline (the playground one, or a fresh one in a temporary folder), 32x32 px
per view, 5 frames. --deep N swaps in a transformer of N blocks, 16 heads x 64 wide, features from block
0.6 N (as 17 of 28 in the 2B model), 64x64 px per view, so the transformer dominates the step. --full-size uses random weights at the real sizes instead, built in memory because the
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
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # runnable without an installed package

from tiny_runs import TINY_CONFIG  # noqa: E402

from DiT4DiT.config.schema import load_config  # noqa: E402
from DiT4DiT.model.framework import build_framework  # noqa: E402
from DiT4DiT.model.freezing import freeze_modules  # noqa: E402
from DiT4DiT.model.modules import cosmos_backbone  # noqa: E402
from DiT4DiT.tools.synthetic_inputs import make_examples  # noqa: E402
from DiT4DiT.base_model import cosmos_2b  # noqa: E402
from DiT4DiT.model.modules.cosmos_pipeline import CosmosComponents  # noqa: E402
from DiT4DiT.model.modules.host_to_device import model_batch  # noqa: E402
from DiT4DiT.model.modules.node_store import Ranks  # noqa: E402
from DiT4DiT.base_model.pipeline_shape import PipelineShape, vae_factors  # noqa: E402
from DiT4DiT.tools.tiny_cosmos import (  # noqa: E402
    DEFAULT_OUT,
    build_scheduler,
    build_text_encoder,
    build_tokenizer,
    build_transformer,
    build_vae,
    write_tiny_pipeline,
)

FROZEN = "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"
FULL_SIZE_OVERRIDES = [
    "framework.cosmos25.base_model=random-full-size",
    "framework.cosmos25.torch_dtype=bfloat16",
    "framework.cosmos25.extract_layer=17",
    "framework.cosmos25.future_loss_type=flow_matching",
    "framework.cosmos25.conditional_frame_timestep=0.0001",
    f"framework.cosmos25.vl_hidden_dim={cosmos_2b.HIDDEN_SIZE}",
    f"framework.cosmos25.max_sequence_length={cosmos_2b.MAX_SEQUENCE_LENGTH}",
    "datasets.vla_data.video_delta_indices=[0,1,2,3,4,5,6,7,8]",
    "datasets.vla_data.action_video_freq_ratio=2",
    "datasets.vla_data.image_size=224",
]

def random_full_size_components(device: torch.device) -> CosmosComponents:
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            text_encoder = Qwen2_5_VLForConditionalGeneration(
                Qwen2_5_VLConfig(text_config=cosmos_2b.TEXT_CONFIG, vision_config=cosmos_2b.VISION_CONFIG)
            ).eval()
            transformer = CosmosTransformer3DModel(**cosmos_2b.TRANSFORMER_CONFIG)
            vae = AutoencoderKLWan(**cosmos_2b.VAE_CONFIG).eval()
    finally:
        torch.set_default_dtype(default_dtype)
    # Any token ids below the vocabulary size do for the tokenizer.
    return components_of(text_encoder, build_tokenizer(), transformer, vae)


def components_of(text_encoder, tokenizer, transformer, vae) -> CosmosComponents:
    z_dim = vae.config.z_dim
    temporal, spatial = vae_factors(vae.config)  # the snapshot's, as the pipeline loader reads them
    return CosmosComponents(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=build_scheduler(),
        latents_mean=torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).float(),
        latents_std=torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).float(),
        vae_scale_factor_temporal=temporal,
        vae_scale_factor_spatial=spatial,
    )


DEEP_HEADS, DEEP_HEAD_DIM = 16, 64


def deep_components(blocks: int) -> CosmosComponents:
    """The tiny text encoder and VAE with a transformer of `blocks` blocks, 16 x 64 wide (the tiny one's layout)."""
    from diffusers import CosmosTransformer3DModel

    width = DEEP_HEADS * DEEP_HEAD_DIM
    tiny = build_transformer().config
    transformer = CosmosTransformer3DModel.from_config(
        {**tiny, "num_layers": blocks, "num_attention_heads": DEEP_HEADS, "attention_head_dim": DEEP_HEAD_DIM,
         "text_embed_dim": width, "encoder_hidden_states_channels": width}
    ).eval()
    tokenizer = build_tokenizer()
    return components_of(build_text_encoder(tokenizer), tokenizer, transformer, build_vae())


def shape_of(components: CosmosComponents) -> PipelineShape:
    """The sizes of in-memory components, as read_pipeline_shape reads them from a folder's configs."""
    transformer = components.transformer.config
    return PipelineShape(hidden_size=transformer.num_attention_heads * transformer.attention_head_dim,
                         num_blocks=transformer.num_layers, temporal_factor=components.vae_scale_factor_temporal)


@contextlib.contextmanager
def substituted_backbone(components: CosmosComponents):
    """Swap the folder loader for in-memory components (the only substitution in this bench)."""
    shape = shape_of(components)
    with mock.patch.object(cosmos_backbone, "read_pipeline_shape", lambda folder: shape), mock.patch.object(
        cosmos_backbone, "load_cosmos_components", lambda *args, **kwargs: components
    ):
        yield


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":  # torch.cuda, or torch.npu (registered by torch_npu)
        getattr(torch, device.type).synchronize(device)


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
    if device.type != "cpu":
        return getattr(torch, device.type).max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


@torch.no_grad()
def feature_pass_seconds(model, examples, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    batch = model_batch(examples, device, torch.float32, targets=False, state=False)  # timed, as in a step
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type != "cpu"):
        model.backbone_interface(batch.video, batch.instructions, want_features=True, want_video_loss=False)
    synchronize(device)
    return time.perf_counter() - start


def measure(model, examples, device: torch.device, steps: int, block: int = 5) -> dict:
    extractor = model.backbone_interface.extractor
    store = extractor.prompt_store
    instructions = [e["lang"] for e in examples]
    extractor.prepare_prompts(instructions, Ranks(), release_encoder=False)  # "store off" still encodes
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    # (prompt store, early exit); store None = framework.cosmos25.prompt_cache: false
    settings = {"store on, early exit": (store, True), "store off, early exit": (None, True),
                "store on, full feature pass": (store, False)}
    times = {name: [] for name in settings}
    feature_times = {True: [], False: []}
    peaks = {}

    def run(name: str, count: int) -> None:
        if device.type != "cpu":
            getattr(torch, device.type).reset_peak_memory_stats(device)
        times[name].extend(step_seconds(model, examples, optimizer, device) for _ in range(count))
        peaks[name] = max(peaks.get(name, 0.0), peak_memory_mib(device))

    for setting in settings.values():  # warm-up
        extractor.prompt_store, extractor.early_exit = setting
        for _ in range(2):
            step_seconds(model, examples, optimizer, device)
    for _ in range(0, steps, block):
        for name, setting in settings.items():
            extractor.prompt_store, extractor.early_exit = setting
            run(name, block)
        for early_exit in feature_times:
            extractor.prompt_store, extractor.early_exit = store, early_exit
            feature_times[early_exit].extend(feature_pass_seconds(model, examples, device) for _ in range(block))
    extractor.prompt_store, extractor.early_exit = store, True
    if device.type != "cpu":
        # Every instruction is stored, so the text encoder is released, as the trainer does.
        extractor.prepare_prompts(instructions, Ranks(), release_encoder=True)
        getattr(torch, device.type).empty_cache()
        times["store on, text encoder released"] = []
        run("store on, text encoder released", steps)
    embedding = store.embedding(instructions[0])
    return {
        "median": {name: statistics.median(t) for name, t in times.items()},
        "feature_pass": {key: statistics.median(t) for key, t in feature_times.items()},
        "peak": peaks,
        "steps": steps,
        "embedding_bytes": embedding.numel() * embedding.element_size(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="measured steps per setting")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--views", type=int, default=3, help="camera views side by side")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    parser.add_argument("--device", default="cpu", help="torch device to train on, e.g. cpu or cuda")
    parser.add_argument("--full-size", action="store_true", help="random weights at the real model sizes")
    parser.add_argument("--deep", type=int, metavar="BLOCKS", help="a transformer-dominated model of BLOCKS blocks")
    parser.add_argument("--mode", default="joint", choices=["joint", "action"],
                        help="framework.cosmos25.training (action: the transformer runs only the feature pass)")
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
        store = [f"framework.cosmos25.prompt_store_dir={Path(tmp) / 'prompt_store'}",
                 f"framework.cosmos25.training={args.mode}"]
        if args.full_size:
            stack.enter_context(substituted_backbone(random_full_size_components(device)))
            cfg = load_config(None, FULL_SIZE_OVERRIDES + [f"trainer.freeze_modules={FROZEN}"] + store)
        elif args.deep:
            width = DEEP_HEADS * DEEP_HEAD_DIM
            stack.enter_context(substituted_backbone(deep_components(args.deep)))
            cfg = load_config(TINY_CONFIG, store + [
                "framework.cosmos25.base_model=random-deep", f"framework.cosmos25.extract_layer={round(0.6 * args.deep)}",
                f"framework.cosmos25.vl_hidden_dim={width}", "datasets.vla_data.image_size=64",
                f"framework.action_model.diffusion_model_cfg.cross_attention_dim={width}"])
        else:
            pipeline = args.pipeline or (
                DEFAULT_OUT if (DEFAULT_OUT / "model_index.json").is_file() else write_tiny_pipeline(Path(tmp) / "tiny")
            )
            cfg = load_config(TINY_CONFIG, [f"framework.cosmos25.base_model={pipeline}"] + store)
        torch.manual_seed(0)
        model = build_framework(cfg).to(device)
        freeze_modules(model, FROZEN)
        examples = make_examples(cfg, batch=args.batch, views=args.views)
        result = measure(model, examples, device, args.steps)

    size = int(cfg.datasets.vla_data.image_size)
    cosmos = cfg.framework.cosmos25
    kind = "full-size (random weights)" if args.full_size else f"deep ({args.deep} blocks)" if args.deep else "tiny"
    print(f"{kind} DiT4DiT, {args.mode} mode, device {device}, batch {args.batch}, {args.views} view(s) of {size}x{size}, "
          f"5 frames, features from block {cosmos.extract_layer}, {result['steps']} steps per setting")
    width = max(len(name) for name in result["median"])
    for name, median in result["median"].items():
        peak = result["peak"][name]
        print(f"  step (fwd+bwd+AdamW), {name:{width}s}: {median * 1e3:8.1f} ms (median), peak {peak:.0f} MiB")
    median, features = result["median"], result["feature_pass"]
    print(f"  ratio store off / store on: {median['store off, early exit'] / median['store on, early exit']:.2f}x")
    print(f"  ratio full feature pass / early exit, whole step: "
          f"{median['store on, full feature pass'] / median['store on, early exit']:.2f}x")
    print(f"  feature pass alone: {features[False] * 1e3:.1f} ms full, {features[True] * 1e3:.1f} ms early exit, "
          f"ratio {features[False] / features[True]:.2f}x")
    print(f"  one stored embedding: {result['embedding_bytes'] / 2**10:.1f} KiB here; real snapshot: "
          f"{cosmos_2b.prompt_embedding_bytes() / 2**20:.0f} MiB ({cosmos_2b.MAX_SEQUENCE_LENGTH} tokens x "
          f"{cosmos_2b.TEXT_LAYERS} layers x {cosmos_2b.TEXT_HIDDEN}, bf16, memory-mapped from the store)")


if __name__ == "__main__":
    main()
