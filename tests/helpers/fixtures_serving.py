"""Serving fixtures: the checkpoint of the session's tiny run (fixtures_training) and its policy, loaded once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_run) -> Path:
    return tiny_run / "checkpoints" / "steps_20_pytorch_model.pt"


@pytest.fixture(scope="session")
def tiny_policy(tiny_ckpt):
    from DiT4DiT.serving.policy import Policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models run fastest on one thread on the shared 2-core machine
    yield Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=8)
    torch.set_num_threads(threads)
