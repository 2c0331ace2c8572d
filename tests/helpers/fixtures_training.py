"""Training fixtures: the golden tiny run, trained once per session in this process, for every test that needs
a trained run (its losses, its checkpoint, its dataset statistics); the uninterrupted `accelerate launch` run that
the kill -9 and SIGTERM resume tests compare with; and one real launch of scripts/train_8p.sh, whose run the
launcher tests and the data end-to-end tests both read."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.tools.tiny_dataset import generate_lerobot

from .fixtures_data import make_read_only, snapshot
from .golden_losses import run_tiny
from .launcher_runs import launch
from .training_runs import RESUME_RUN, train


@pytest.fixture(scope="session")
def tiny_run(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory) -> Path:
    """<run_dir> of the 20-step tiny run: config.yaml, dataset_statistics.json, metrics.jsonl,
    checkpoints/steps_20_pytorch_model.pt."""
    return run_tiny(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory.mktemp("tiny_runs"))


@pytest.fixture(scope="session")
def uninterrupted_run(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory) -> Path:
    """<run_dir> of `accelerate launch` on RESUME_RUN, one process, never stopped (read only by the tests)."""
    run_root = tmp_path_factory.mktemp("uninterrupted")
    result = train(tiny_pipeline_dir, tiny_robotwin_root, run_root, "straight", *RESUME_RUN)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_root / "straight"


@pytest.fixture(scope="session")
def launcher_run(tiny_pipeline_dir, tmp_path_factory):
    """scripts/train_8p.sh on this CPU host (its defaults: the tiny config, one process), 3 steps, on a LeRobot
    v3.0 dataset fresh from lerobot given by path (no modality.json, read-only, a folder name with spaces), with
    a numeric run id and a top-level key passed through. Returns (result, run_dir, dataset, its snapshot before)."""
    root = tmp_path_factory.mktemp("launcher_run")
    dataset = generate_lerobot("robotwin", root / "data" / "my bimanual set 2026", episodes_per_file=2)
    make_read_only(dataset)
    before = snapshot(dataset)
    result = launch("--max_train_steps=3", "--trainer.save_interval=3", "--trainer.num_warmup_steps=1",
                    f"--base_model={tiny_pipeline_dir}", f"--data_mix={dataset}", "--data_config=robotwin",
                    f"--run_root_dir={root / 'runs'}", "--run_id=20250101", "--seed=7",
                    f"--datasets.vla_data.cache_dir={root / 'cache'}", timeout=900)
    return result, root / "runs" / "20250101", dataset, before
