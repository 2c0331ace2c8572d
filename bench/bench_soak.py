"""Soak: does memory or the file-descriptor count creep over a long run? Training, then the policy server.

    .venv/bin/python bench/bench_soak.py [--steps 2000] [--requests 2000] [--json soak.json]
                                         [--base_model DIR --data_root_dir DIR]

1. The real trainer (one process, `datasets.vla_data.num_workers=2`) runs --steps tiny steps on the tiny pipeline
   and tiny RoboTwin data (generated in a temporary folder unless given); the RSS of the trainer plus its data workers is read
   from /proc while it runs, against the step it has logged.
2. The policy server (its own process, loopback) serves --requests batch-1 requests from one client, on the
   final weights of that run; its RSS is read every 50 requests (every tenth of a shorter run).
Each slope is a least-squares fit over the samples after the first fifth (warm-up: allocator pools, caches,
the prompt store), in MiB per 1,000 steps / requests; the open descriptors are counted just before each ends.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from bench_serving import Server, request_for  # noqa: E402

from DiT4DiT.serving.client import PolicyClient  # noqa: E402

SAMPLE_EVERY_REQUESTS = 50


def rss_mib(pid: int) -> float:
    """VmRSS of `pid` and its children (the data workers), in MiB; 0 for a process that is gone."""
    total = 0
    for process in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{process}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    except OSError:
        return []


def open_fds(pid: int) -> int:
    try:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return 0


def slope_per_thousand(samples: list[tuple[int, float]]) -> float:
    """MiB per 1,000 units (steps or requests) over the samples after the first fifth of the run."""
    last = max(x for x, _ in samples)
    kept = [(x, y) for x, y in samples if x >= last / 5]
    if len({x for x, _ in kept}) < 2:
        return float("nan")
    x, y = np.asarray(kept, dtype=float).T
    return float(np.polyfit(x, y, 1)[0] * 1000)


def logged_step(metrics: Path) -> int:
    try:
        lines = metrics.read_text().splitlines()
    except OSError:
        return 0
    steps = [json.loads(line)["step"] for line in lines[-3:] if line.endswith("}")]
    return max(steps, default=0)


def soak_training(workdir: Path, steps: int, pipeline: Path | None, data: Path | None) -> dict:
    """The tiny config on `pipeline` and `data`, each written into workdir when None (which imports torch here)."""
    if pipeline is None:
        from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline

        pipeline = write_tiny_pipeline(workdir / "cosmos")
    if data is None:
        from DiT4DiT.tools.tiny_robotwin import generate

        data = workdir / "data"
        generate(data, seed=0)
    command = [sys.executable, "DiT4DiT/training/train.py", "--config_yaml", "DiT4DiT/config/tiny/dit4dit_tiny.yaml",
               f"--framework.cosmos25.base_model={pipeline}", f"--datasets.vla_data.data_root_dir={data}",
               f"--run_root_dir={workdir / 'runs'}", "--run_id=soak", "--trackers=[jsonl]",
               f"--datasets.vla_data.cache_dir={workdir / 'cache'}", "--datasets.vla_data.num_workers=2",
               f"--trainer.max_train_steps={steps}", "--trainer.save_interval=1000000", "--trainer.logging_frequency=1",
               f"--trainer.eval_interval={max(steps // 10, 1)}", "--trainer.num_warmup_steps=1"]
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline", OMP_NUM_THREADS="1")
    log = workdir / "train.log"  # a file, not a pipe: a pipe nobody reads fills up and blocks the trainer
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    metrics, by_step, fds = workdir / "runs/soak/metrics.jsonl", {}, 0
    began = time.perf_counter()
    while process.poll() is None:
        step = logged_step(metrics)
        if 0 < step < steps:  # the loop, not the start-up or the final save and shutdown
            rss, count = rss_mib(process.pid), open_fds(process.pid)
            if rss and count:
                by_step[step], fds = rss, count
        time.sleep(0.5)
    samples = sorted(by_step.items())
    if not samples:
        raise SystemExit("no training step was sampled: use a few more --steps")
    if process.returncode:
        raise SystemExit(f"the soak run failed ({process.returncode}):\n{log.read_text()[-3000:]}")
    return {"steps": steps, "seconds": time.perf_counter() - began, "rss_first_mib": samples[0][1],
            "rss_last_mib": samples[-1][1], "rss_slope_mib_per_1000": slope_per_thousand(samples), "open_fds_end": fds,
            "checkpoint": str(workdir / "runs/soak/final_model/pytorch_model.pt")}


def soak_serving(ckpt: Path, requests: int) -> dict:
    server = Server(ckpt, "cpu")
    process = server.process
    try:
        client = PolicyClient("127.0.0.1", server.port, wait_s=60)
        example = request_for(client.metadata, seed=0)
        samples, began = [], time.perf_counter()
        every = max(1, min(SAMPLE_EVERY_REQUESTS, requests // 10))
        for done in range(1, requests + 1):
            client.infer([example])
            if done % every == 0 or done == requests:
                samples.append((done, rss_mib(process.pid)))
        fds = open_fds(process.pid)
        client.close()
    finally:
        server.stop()
    return {"requests": requests, "seconds": time.perf_counter() - began, "rss_first_mib": samples[0][1],
            "rss_last_mib": samples[-1][1], "rss_slope_mib_per_1000": slope_per_thousand(samples), "open_fds_end": fds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="tiny training steps (2 data workers)")
    parser.add_argument("--requests", type=int, default=2000, help="policy-server requests")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--base_model", type=Path, help="tiny pipeline folder (default: one written for the run)")
    parser.add_argument("--data_root_dir", type=Path, help="tiny RoboTwin data root (default: one written for the run)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.requests < 1:
        parser.error("--steps and --requests must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench_soak_") as tmp:
        training = soak_training(Path(tmp), args.steps, args.base_model, args.data_root_dir)
        serving = soak_serving(Path(training.pop("checkpoint")), args.requests)
    result = {"training": training, "serving": serving}
    print("\nsoak, one process on CPU\n")
    print("| phase | count | seconds | RSS first MiB | RSS last MiB | slope MiB/1,000 | open fds at end |")
    print("|---|---|---|---|---|---|---|")
    for name, row in result.items():
        count = row.get("steps", row.get("requests"))
        print(f"| {name} | {count} | {row['seconds']:.0f} | {row['rss_first_mib']:.0f} | {row['rss_last_mib']:.0f} | "
              f"{row['rss_slope_mib_per_1000']:+.1f} | {row['open_fds_end']} |")
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
