"""Model fixtures: the tiny Cosmos pipeline (written once per session) and tiny DiT4DiT configs and batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.tools.synthetic_inputs import make_examples
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


@pytest.fixture
def tiny_examples():
    return make_examples
