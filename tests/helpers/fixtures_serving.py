"""Serving fixtures: a tiny run trained for two steps by the real trainer, and its policy loaded once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_run(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory) -> Path:
    """<run_dir> of a two-step tiny run: config.yaml, dataset_statistics.json, checkpoints/steps_2_pytorch_model.pt."""
    from test_train_e2e import train  # imported here, not at plugin load, so pytest still rewrites its asserts

    run_root = tmp_path_factory.mktemp("serving_runs")
    result = train(tiny_pipeline_dir, tiny_robotwin_root, run_root, "served", "--trainer.max_train_steps=2",
                   "--trainer.save_interval=2", "--trainer.eval_interval=2")
    assert result.returncode == 0, result.stderr[-3000:]
    return run_root / "served"


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_run) -> Path:
    return tiny_run / "checkpoints" / "steps_2_pytorch_model.pt"


@pytest.fixture(scope="session")
def tiny_policy(tiny_ckpt):
    from DiT4DiT.serving.policy import Policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models run fastest on one thread on the shared 2-core machine
    yield Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=8)
    torch.set_num_threads(threads)
