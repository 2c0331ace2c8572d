"""Training throughput of the tiny config: 1 process vs 2 processes, measured in one run.

    .venv/bin/python bench/bench_train.py [--steps 40]

Each run goes through the real `accelerate launch` path with the CPU launch configuration. Steps/s and
samples/s come from the trainer's own metrics.jsonl (the window after warm-up), peak memory from the same
records; the 2-process / 1-process ratio is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from tiny_runs import TINY_CONFIG, launch_training


def batch_size() -> int:
    from DiT4DiT.config.schema import load_config

    return int(load_config(TINY_CONFIG).datasets.vla_data.per_device_batch_size)


def run(num_processes: int, steps: int, run_root: Path) -> dict:
    log_every = steps // 2
    result = launch_training(run_root, f"bench_{num_processes}p", f"--trainer.max_train_steps={steps}",
                             f"--trainer.save_interval={steps}", f"--trainer.logging_frequency={log_every}",
                             f"--trainer.eval_interval={steps}", processes=num_processes)
    if result.returncode != 0:
        sys.exit(f"training with {num_processes} process(es) failed:\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_root / f"bench_{num_processes}p" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if "samples_per_s" in r][-1]  # second window: start-up excluded
    return {
        "samples_per_s": last["samples_per_s"],
        "steps_per_s": last["samples_per_s"] / (batch_size() * num_processes),
        "peak_rss_mb": last["host_peak_rss_mb"],
        "model_time_s": last["model_time"],
        "data_time_s": last["data_time"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {n: run(n, args.steps, Path(tmp)) for n in (1, 2)}
    for n, r in results.items():
        print(f"{n} process(es): {r['steps_per_s']:.2f} steps/s, {r['samples_per_s']:.2f} samples/s, model {r['model_time_s']:.3f} s/step, "
              f"data {r['data_time_s']:.3f} s/step, peak RSS {r['peak_rss_mb']:.0f} MB per process")
    print(f"2p / 1p samples/s ratio: {results[2]['samples_per_s'] / results[1]['samples_per_s']:.2f}")


if __name__ == "__main__":
    main()
