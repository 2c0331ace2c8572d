"""Data-loading throughput for the RoboTwin sample shape, against a naive decode-everything baseline, in one run.

    .venv/bin/python bench/bench_data.py [--samples 96] [--height 240 --width 320 --frames 300 --gop 30]

A RoboTwin-format dataset (3 tasks x 3 episodes, 3 h264 cameras) is generated into a temporary folder; samples
have the robotwin shape: 3 views x 8 frames resized to 224 and concatenated, 8-step action chunk. Each loader
is timed with 0 and 2 DataLoader workers after a warm-up batch. The baseline is the same pipeline with a decoder
that decodes every frame of the episode and then picks the nearest ones. Samples/s, CPU ms per sample (less
sensitive to other load on a shared machine) and their ratios are printed.

The keyframe interval decides how much seeking saves: lerobot's encoder writes one every 2 frames, x264's
default is 250 (the GR00T demo data); --gop 30 sits between them.

Then the same samples from the latent store (framework.cosmos25.latent_cache): every clip's posterior written once
(through the tiny pipeline's VAE, whose latents have the real shape: 16 channels at 1/8 of 224 x 672, 2 latent
frames, 221 KiB a row), read in place of decoding; samples/s per DataLoader worker with decode and with the store.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import torch
from av.video.reformatter import VideoReformatter

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkActionModelSection
from DiT4DiT.config.typed import section
from DiT4DiT.dataloader import build_vla_dataset, collate_fn
from DiT4DiT.dataloader.video import frame_tolerance
from DiT4DiT.tools.tiny_robotwin import generate


def decode_everything(path: Path, timestamps: np.ndarray, *, fps: float, episode: int) -> np.ndarray:
    """Baseline: decode every frame of the file to RGB, then take the nearest frame for each timestamp.

    It converts frames as the seeking decoder does (one reusable converter), so the ratio measures seeking alone.
    """
    to_rgb = VideoReformatter()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        decoded = [(float(f.time), to_rgb.reformat(f, format="rgb24").to_ndarray()) for f in container.decode(stream)]
    times = np.array([t for t, _ in decoded])
    nearest = np.abs(times[None, :] - np.asarray(timestamps)[:, None]).argmin(axis=1)
    assert np.abs(times[nearest] - timestamps).max() <= frame_tolerance(fps)
    return np.stack([decoded[i][1] for i in nearest])


def _cpu_seconds() -> float:
    """CPU time of this process plus its finished children (DataLoader workers are reaped when the loader ends)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure(dataset, workers: int, samples: int, batch_size: int) -> dict:
    """Wall-clock samples/s after a warm-up batch, and CPU seconds per sample (all processes, warm-up included).

    On a shared machine the wall-clock figure depends on the other load; CPU seconds per sample do much less.
    """
    subset = torch.utils.data.Subset(dataset, range(samples + batch_size))
    loader = torch.utils.data.DataLoader(subset, batch_size=batch_size, num_workers=workers, collate_fn=collate_fn)
    cpu_start = _cpu_seconds()
    batches = iter(loader)
    next(batches)  # warm-up: worker start-up and first file opens are not throughput
    start, seen = time.perf_counter(), 0
    for batch in batches:
        seen += len(batch)
    wall = time.perf_counter() - start
    del batches
    cpu = _cpu_seconds() - cpu_start
    return {"samples_per_s": round(seen / wall, 2), "cpu_ms_per_sample": round(1000 * cpu / (seen + batch_size), 1)}


def latent_store_figures(dataset, scratch: Path, args) -> dict:
    """The dataset's clips into a latent store (the tiny VAE: the real latent shape), then the samples read from it,
    with 0 and 2 workers: samples/s, per worker, CPU ms per sample; and the fill's own time."""
    from DiT4DiT.model.modules.clip_encoding import load_vae
    from DiT4DiT.model.modules.latent_store import fill_latent_store
    from DiT4DiT.model.modules.node_store import Ranks
    from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline

    pipeline = write_tiny_pipeline(scratch / "tiny")
    vae = load_vae(pipeline, torch.float32).requires_grad_(False)
    start = time.perf_counter()
    store, report = fill_latent_store(vae, dataset.latent_episodes(), store_dir=scratch / "latents", base_model=pipeline,
                                      layout=dataset.sample_layout(), num_frames_out=8, temporal_factor=4,
                                      with_future=True, ranks=Ranks(), batch_size=args.batch_size, mixed_precision="no")
    figures = {"clips": report.rows, "store_mib": round(report.store_bytes / 2**20, 1),
               "fill_s": round(time.perf_counter() - start, 1)}
    dataset.use_latents(store)
    try:
        for workers in (0, 2):
            stored = measure(dataset, workers, args.samples, args.batch_size)
            figures[f"workers={workers}"] = {**stored,
                                             "per_worker_samples_per_s": round(stored["samples_per_s"] / max(workers, 1), 2)}
    finally:
        dataset.latents = None
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=96, help="samples timed per measurement")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--frames", type=int, default=300, help="frames per episode (20 s at 15 fps)")
    parser.add_argument("--gop", type=int, default=30, help="frames between keyframes in the generated videos")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "robotwin"
        generate(root, seed=0, episodes=3, frames=(args.frames, args.frames), height=args.height, width=args.width,
                 gop=args.gop)
        cfg = load_config(None, [
            f"datasets.vla_data.data_root_dir={root}", "datasets.vla_data.data_mix=robotwin",
            f"datasets.vla_data.cache_dir={Path(scratch) / 'cache'}", "datasets.vla_data.image_size=224",
            "datasets.vla_data.video_delta_indices=[0,1,2,3,4,5,6,7]", "datasets.vla_data.action_video_freq_ratio=1",
            "framework.action_model.future_action_window_size=7",
        ])
        dataset = build_vla_dataset(section(cfg.datasets.vla_data, DatasetsVlaDataSection),
                                    section(cfg.framework.action_model, FrameworkActionModelSection).chunk_length, cfg.seed)
        example = dataset[0]
        assert len(example["image"]) == 8 and example["image"][0].shape == (3, 224, 672)
        assert example["action"].shape[0] == 8
        figures = {"dataset": f"3 tasks x 3 episodes x {args.frames} frames, 3 cameras {args.height}x{args.width} "
                              f"h264, keyframe every {args.gop}", "cpus": os.cpu_count(),
                   "torch_threads": torch.get_num_threads(), "load_average_1min_before": round(os.getloadavg()[0], 2)}
        seek_decode = dataset.frame_decoder
        for workers in (0, 2):
            dataset.frame_decoder = seek_decode
            ours = measure(dataset, workers, args.samples, args.batch_size)
            dataset.frame_decoder = decode_everything
            naive = measure(dataset, workers, args.samples // 4, args.batch_size)
            figures[f"workers={workers}"] = {
                "seek_decode": ours, "naive_decode_all": naive,
                "ratio_samples_per_s": round(ours["samples_per_s"] / naive["samples_per_s"], 2),
                "ratio_cpu_per_sample": round(naive["cpu_ms_per_sample"] / ours["cpu_ms_per_sample"], 2),
            }
            figures[f"workers={workers}"]["per_worker_samples_per_s"] = round(ours["samples_per_s"] / max(workers, 1), 2)
        figures["latent_store"] = latent_store_figures(dataset, Path(scratch), args)
        figures["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
