"""Model fixtures: the tiny Cosmos pipeline (written once per session) and tiny DiT4DiT configs and batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline

TINY_YAML = Path(__file__).resolve().parents[2] / "DiT4DiT" / "config" / "tiny" / "dit4dit_tiny.yaml"
# The backbone keys that fit the tiny pipeline (4 blocks of width 32), for a full-size config checked against it.
TINY_BACKBONE = ("framework.cosmos25.extract_layer=2", "framework.cosmos25.vl_hidden_dim=32",
                 "framework.action_model.diffusion_model_cfg.cross_attention_dim=32")


@pytest.fixture(scope="session")
def tiny_pipeline_dir(tmp_path_factory) -> Path:
    return write_tiny_pipeline(tmp_path_factory.mktemp("cosmos") / "Cosmos-Predict2.5-tiny")


@pytest.fixture
def one_torch_thread():
    """Tiny models run fastest on one intra-op thread; on a busy 2-core machine two threads contend and run
    ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_model_cfg(tiny_pipeline_dir, one_torch_thread, tmp_path):
    """tiny_model_cfg("a.b=c", ...) -> the tiny config pointing at the session's pipeline, with overrides.

    The prompt store goes to the test's temporary folder."""

    def make(*overrides: str):
        return load_config(TINY_YAML, [f"framework.cosmos25.base_model={tiny_pipeline_dir}",
                                       f"framework.cosmos25.prompt_store_dir={tmp_path / 'prompt_store'}", *overrides])

    return make


def make_examples(cfg, batch: int = 2, views: int = 1, frames: int | None = None, seed: int = 0) -> list[dict]:
    """Example dicts shaped like the data loader's for `cfg` (views side by side, frames in [0, 1])."""
    vla, action_cfg = cfg.datasets.vla_data, cfg.framework.action_model
    if frames is None:
        frames = len(range(0, len(vla.video_delta_indices), vla.action_video_freq_ratio))
    size, chunk = int(vla.image_size), int(action_cfg.future_action_window_size) + 1
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    action_mask = np.ones((chunk, vla.max_action_dim), dtype=bool)
    action_mask[:, -2:] = False  # two padded action dims, as when a robot has fewer than max_action_dim
    return [
        {
            "image": [torch.rand(3, size, size * views, generator=generator) for _ in range(frames)],
            "lang": ["pick up the red block", "open the drawer", "stack the cups"][index % 3],
            "action": rng.uniform(-1, 1, (chunk, vla.max_action_dim)).astype(np.float32) * action_mask,
            "state": rng.uniform(-1, 1, (1, vla.max_state_dim)).astype(np.float32),
            "action_mask": action_mask,
            "state_mask": np.ones((1, vla.max_state_dim), dtype=bool),
        }
        for index in range(batch)
    ]


@pytest.fixture
def tiny_examples():
    return make_examples
