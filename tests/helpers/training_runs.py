"""Tiny training runs for tests: through a real `accelerate launch` subprocess, or `main()` in this process.

Both take the tiny pipeline and tiny RoboTwin folders the session fixtures write, a run root and a run id, then
any further `--a.b=c` overrides. The in-process run is the fast one: no interpreter start, no imports again.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import torch

from DiT4DiT.launch.environment import omp_threads
from .cli_runs import free_port, run_tree

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def trainer_arguments(pipeline: Path, data: Path, run_root: Path, run_id: str, *overrides: str) -> list[str]:
    """train.py's arguments: the tiny config on these folders, metrics to JSONL only, no DataLoader workers."""
    return [
        "--config_yaml", TINY_CONFIG,
        f"--framework.cosmos25.base_model={pipeline}", f"--datasets.vla_data.data_root_dir={data}",
        f"--run_root_dir={run_root}", f"--run_id={run_id}", "--trackers=[jsonl]",
        f"--datasets.vla_data.cache_dir={run_root / 'cache'}",
        "--datasets.vla_data.num_workers=0", *overrides,
    ]


def trainer_command(pipeline: Path, data: Path, run_root: Path, run_id: str, *overrides: str, processes: int = 1) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", "DiT4DiT/config/deepseeds/cpu.yaml", "--num_processes", str(processes),
        *rendezvous_port(processes), "DiT4DiT/training/train.py", *trainer_arguments(pipeline, data, run_root, run_id, *overrides),
    ]


def rendezvous_port(processes: int) -> list[str]:
    """A free port for a multi-process launch: accelerate's default 29500 is probed and then bound, so two launches
    that start together on the other test worker can both take it, and a rank joins the other run and waits."""
    return ["--main_process_port", str(free_port())] if processes > 1 else []


def environment(processes: int = 1) -> dict:
    """The worker's share of the cores (tests/conftest.py) split over the launch's processes."""
    threads = omp_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1), processes)
    return dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", OMP_NUM_THREADS=str(threads))


def train(pipeline, data, run_root, run_id, *overrides, processes=1) -> subprocess.CompletedProcess:
    """`accelerate launch` of the trainer, waited for; the result holds its exit code and output."""
    return run_tree(trainer_command(pipeline, data, run_root, run_id, *overrides, processes=processes),
                    cwd=ROOT, env=environment(processes), timeout=900)


# The interrupted-and-resumed runs (kill -9, SIGTERM) and the uninterrupted run they must end equal to: a state
# at step 6, an evaluation every 4 steps, every step logged, a DataLoader worker (a signal must reach it too).
RESUME_RUN = ("--trainer.max_train_steps=12", "--trainer.save_interval=6", "--trainer.eval_interval=4",
              "--trainer.logging_frequency=1", "--datasets.vla_data.num_workers=1")


def train_in_process(pipeline, data, run_root, run_id, *overrides) -> subprocess.CompletedProcess:
    """`main()` of the trainer in this process, with `train()`'s result: exit code and what it wrote to stderr.

    One intra-op thread (the tiny model's fastest, and the count the golden losses were written with); the
    process-wide state main() sets (accelerate's singletons, the root logger, warnings capture) is put back.
    """
    from accelerate.state import AcceleratorState, GradientState

    from DiT4DiT.training.train import main

    arguments = trainer_arguments(pipeline, data, run_root, run_id, *overrides)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    root, threads, stderr = logging.getLogger(), torch.get_num_threads(), io.StringIO()
    handlers, level = root.handlers[:], root.level
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stderr(stderr):  # before main(): its log handler binds to sys.stderr
            code = main(arguments)
    finally:
        torch.set_num_threads(threads)
        logging.captureWarnings(False)
        root.handlers[:], root.level = handlers, level
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    return subprocess.CompletedProcess(["train.main", *arguments], code, "", stderr.getvalue())


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
