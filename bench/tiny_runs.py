"""The tiny config, and a training run of it through the real `accelerate launch` path (CPU launch
configuration), as the benches start one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = ROOT / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def launch_training(run_root: Path, run_id: str, *overrides: str, processes: int = 1) -> subprocess.CompletedProcess:
    """Train the tiny config into `run_root`/`run_id` (metrics to JSONL only), waited for; the 2 cores split over
    the processes."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "DiT4DiT/config/deepseeds/cpu.yaml"), "--num_processes", str(processes),
        str(ROOT / "DiT4DiT/training/train.py"), "--config_yaml", str(TINY_CONFIG),
        f"--run_root_dir={run_root}", f"--run_id={run_id}", "--trackers=[jsonl]",
        f"--datasets.vla_data.cache_dir={run_root / 'cache'}", *overrides,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", OMP_NUM_THREADS=str(max(1, 2 // processes)))
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
