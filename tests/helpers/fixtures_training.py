"""Training fixtures: the golden tiny run, trained once per session in this process, for every test that needs
a trained run (its losses, its checkpoint, its dataset statistics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .golden_losses import run_tiny


@pytest.fixture(scope="session")
def tiny_run(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory) -> Path:
    """<run_dir> of the 20-step tiny run: config.yaml, dataset_statistics.json, metrics.jsonl,
    checkpoints/steps_20_pytorch_model.pt."""
    return run_tiny(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory.mktemp("tiny_runs"))
