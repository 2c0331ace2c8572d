"""Activation checkpointing at the `large` size: the bytes a training step saves for backward and the CPU step
time, without it, with N of the Cosmos blocks recomputed (trainer.gradient_checkpointing_blocks) and with all of them
and the action head's (trainer.enable_gradient_checkpointing), in one run.

    .venv/bin/python bench/bench_checkpointing.py [--blocks 12] [--recompute 0,3,6,9,12] [--image 128] [--batch 2]
        [--steps 8] [--threads 2] [--profile]

--profile also prints trainer.profile_steps' table (DiT4DiT/training/profiler.py, torch.profiler) for 2 steps
without checkpointing.

The `large` size is bench_model.py's --deep model (a Cosmos transformer of 12 blocks, 16 heads x 64 = 1024 wide,
features from block 7, the tiny text encoder and VAE frozen, the tiny config's action head) at 128 px per view,
joint mode, float32 on the CPU. One model is built; the settings take turns between blocks of steps (forward +
backward + AdamW, timed with and without AdamW), so all see the same machine load. Saved bytes are counted by
torch.autograd.graph.saved_tensors_hooks (each storage once, parameters left out) over the model's forward.
The real width's per-block figures: python -m DiT4DiT.tools.measure_activation_memory.

glibc hands large freed blocks back to the kernel, so on the CPU a step that keeps more activations also faults
more fresh pages in; a device's caching allocator does not. To time the recomputation alone, keep freed memory:
    MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=1073741824 \
        .venv/bin/python bench/bench_checkpointing.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import bench_model  # noqa: E402
from tiny_runs import TINY_CONFIG  # noqa: E402

from DiT4DiT.config.schema import load_config  # noqa: E402
from DiT4DiT.facts import latent_frame_count  # noqa: E402
from DiT4DiT.model.framework import build_framework  # noqa: E402
from DiT4DiT.model.freezing import freeze_modules  # noqa: E402
from DiT4DiT.model.modules.activation_checkpointing import checkpoint_first  # noqa: E402
from DiT4DiT.tools.measure_activation_memory import saved_for_backward_bytes  # noqa: E402
from DiT4DiT.tools.synthetic_inputs import make_examples  # noqa: E402


def set_checkpointing(model, blocks: int, head: bool) -> None:
    """What trainer.gradient_checkpointing_blocks (`blocks`) and enable_gradient_checkpointing (`head`, with all
    blocks) set when the model is built, switched on one model."""
    transformer = model.backbone_interface.extractor.transformer
    if blocks:
        transformer.enable_gradient_checkpointing(checkpoint_first(transformer.transformer_blocks, blocks))
    else:
        transformer.disable_gradient_checkpointing()
    model.action_model.model.gradient_checkpointing = head


def saved_bytes(model, examples) -> int:
    return saved_for_backward_bytes(lambda: model(examples), exclude=model.parameters())[0]


def step_seconds(model, examples, optimizer) -> tuple[float, float]:
    """(forward + backward, the whole step with AdamW) in seconds: checkpointing changes only the first."""
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    sum(model(examples).values()).backward()
    backward_done = time.perf_counter()
    optimizer.step()
    return backward_done - start, time.perf_counter() - start


def profile_steps(model, examples, optimizer, folder: Path) -> None:
    """Steps 2 and 3 under the trainer's own step profiler (step 1 its warm-up, not counted); it logs the table."""
    import logging

    from DiT4DiT.training.profiler import step_profiler

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    set_checkpointing(model, 0, False)
    with step_profiler(torch.profiler, "2,3", 0, folder, 0, True, "cpu") as profiler:
        for done in (1, 2, 3):
            step_seconds(model, examples, optimizer)
            profiler.step(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--recompute", default="0,3,6,9,12", help="counts of Cosmos blocks to recompute, one row each")
    parser.add_argument("--image", type=int, default=128, help="pixels per side of the one view")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="measured steps per setting")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="the profiler's top operators of 2 steps, too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    width = bench_model.DEEP_HEADS * bench_model.DEEP_HEAD_DIM
    with tempfile.TemporaryDirectory() as tmp, bench_model.substituted_backbone(bench_model.deep_components(args.blocks)):
        cfg = load_config(TINY_CONFIG, [
            f"framework.cosmos25.prompt_store_dir={Path(tmp) / 'prompt_store'}", "framework.cosmos25.base_model=random-deep",
            f"framework.cosmos25.extract_layer={round(0.6 * args.blocks)}", f"framework.cosmos25.vl_hidden_dim={width}",
            f"datasets.vla_data.image_size={args.image}",
            f"framework.action_model.diffusion_model_cfg.cross_attention_dim={width}"])
        torch.manual_seed(0)
        model = build_framework(cfg)
        freeze_modules(model, bench_model.FROZEN)
        examples = make_examples(cfg, batch=args.batch, views=1)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

        if args.profile:
            profile_steps(model, examples, optimizer, Path(tmp))
        settings = [(f"{n} of {args.blocks} blocks", n, False) for n in map(int, args.recompute.split(","))]
        settings.append((f"all + action head", args.blocks, True))  # trainer.enable_gradient_checkpointing
        saved, times = {}, {name: [] for name, _, _ in settings}
        for name, blocks, head in settings:
            set_checkpointing(model, blocks, head)
            saved[name] = saved_bytes(model, examples)
            step_seconds(model, examples, optimizer)  # warm-up
        for _ in range(0, args.steps, 2):
            for name, blocks, head in settings:
                set_checkpointing(model, blocks, head)
                times[name].extend(step_seconds(model, examples, optimizer) for _ in range(2))
    median = {name: [statistics.median(t[i] for t in runs) for i in (0, 1)] for name, runs in times.items()}
    tokens = latent_frame_count(model.backbone_interface.num_frames_out) * (args.image // 16) ** 2
    print(f"large: {args.blocks} Cosmos blocks of {width}, {args.image} px ({tokens} tokens), batch {args.batch}, "
          f"joint mode, float32, {torch.get_num_threads()} threads, {args.steps} steps per setting (medians)")
    base = settings[0][0]
    print("| recomputed | saved for backward MiB | forward + backward ms | whole step ms | step / none |")
    print("|---|---|---|---|---|")
    for name, _, _ in settings:
        print(f"| {name} | {saved[name] / 2**20:.1f} | {median[name][0] * 1e3:.0f} | {median[name][1] * 1e3:.0f} | "
              f"{median[name][1] / median[base][1]:.2f} |")


if __name__ == "__main__":
    main()
