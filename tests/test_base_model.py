"""A run folder made on another machine records its base model as a path there: `--base_model` (or
DIT4DIT_BASE_MODEL) points the server, open-loop evaluation and from_pretrained at the local snapshot; without it
the error names the recorded path, the key and the option."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.dataloader import save_dataset_statistics
from DiT4DiT.evaluation.open_loop import main as open_loop_main
from DiT4DiT.model.framework.base_framework import BASE_MODEL_ENV, RunFolderError, baseframework
from DiT4DiT.serving.client import PolicyClient
from DiT4DiT.serving.policy import Policy
from DiT4DiT.serving.server import main as server_main
from DiT4DiT.tools.tiny_dataset import generate
from helpers.fixtures_data import dataset_of
from helpers.fixtures_serving import served
from helpers.in_process import call_main
from test_run_folders import LIBERO_DIMS, TINY_MODEL, TINY_YAML, _example, _original_libero_run

# Where the original's released LIBERO run folders say their snapshot is: a path on the machine that trained them.
ELSEWHERE = "/home/trainer/pretrained_models/Cosmos-Predict2.5-2B"


@pytest.fixture
def libero_run_from_elsewhere(tiny_pipeline_dir, tmp_path, monkeypatch):
    """(checkpoint, its seeded actions while the recorded snapshot was here) of an original-style LIBERO run
    folder whose config.yaml then names a snapshot that does not exist on this machine."""
    monkeypatch.delenv(BASE_MODEL_ENV, raising=False)
    checkpoint = _original_libero_run(tmp_path / "run", tiny_pipeline_dir)
    request = [dict(_example(32, 2, 16, seed=s), seed=s) for s in range(2)]
    policy = Policy.load(checkpoint, torch.device("cpu"))
    here = policy.infer(policy.check({"examples": request}))["normalized_actions"]
    config = tmp_path / "run/config.yaml"
    assert f"base_model: {tiny_pipeline_dir}" in config.read_text()
    config.write_text(config.read_text().replace(f"base_model: {tiny_pipeline_dir}", f"base_model: {ELSEWHERE}"))
    return checkpoint, request, here


def test_without_base_model_the_error_names_the_recorded_path_the_key_and_the_option(libero_run_from_elsewhere):
    checkpoint, _, _ = libero_run_from_elsewhere
    with pytest.raises(RunFolderError) as refused:
        baseframework.from_pretrained(checkpoint)
    for words in (ELSEWHERE, "framework.cosmos25.base_model", "does not exist here", "--base_model", BASE_MODEL_ENV):
        assert words in str(refused.value)
    env = {k: v for k, v in os.environ.items() if k != BASE_MODEL_ENV}
    result = call_main(server_main, ["--ckpt", str(checkpoint), "--port", "0", "--device", "cpu"], env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert ELSEWHERE in line and "framework.cosmos25.base_model" in line and "--base_model" in line


def test_base_model_or_its_variable_loads_the_same_model(libero_run_from_elsewhere, tiny_pipeline_dir, monkeypatch,
                                                        one_torch_thread):
    checkpoint, request, here = libero_run_from_elsewhere
    policy = Policy.load(checkpoint, torch.device("cpu"), base_model=str(tiny_pipeline_dir))
    np.testing.assert_allclose(policy.infer(policy.check({"examples": request}))["normalized_actions"], here,
                               rtol=0, atol=1e-6)
    assert policy.model.config.framework.cosmos25.base_model == str(tiny_pipeline_dir)
    monkeypatch.setenv(BASE_MODEL_ENV, str(tiny_pipeline_dir))
    model = baseframework.from_pretrained(checkpoint)
    assert model.config.framework.cosmos25.base_model == str(tiny_pipeline_dir)


@pytest.mark.slow
def test_a_server_process_serves_a_run_folder_from_elsewhere_with_base_model(libero_run_from_elsewhere,
                                                                              tiny_pipeline_dir):
    checkpoint, request, here = libero_run_from_elsewhere
    with served(checkpoint, "--base_model", str(tiny_pipeline_dir)) as (process, port, lines):
        with PolicyClient("127.0.0.1", port, wait_s=30) as client:
            reply = client.infer(request)
    np.testing.assert_allclose(reply["normalized_actions"], here, rtol=0, atol=1e-6)
    assert any(f"replaced by {tiny_pipeline_dir}" in line for line in lines)


@pytest.mark.slow
def test_open_loop_evaluates_a_run_folder_from_elsewhere_with_base_model(libero_run_from_elsewhere, tiny_pipeline_dir,
                                                                         tmp_path, one_torch_thread):
    checkpoint, _, _ = libero_run_from_elsewhere
    generate("libero_all", tmp_path / "data", datasets=1, episodes=2, frames=(10, 14))
    # The original's statistics name no state normalisation, which open-loop evaluation needs: this data's, as ours.
    cfg = load_config(TINY_YAML, [f"framework.cosmos25.base_model={tiny_pipeline_dir}", *TINY_MODEL, *LIBERO_DIMS,
                                  f"datasets.vla_data.data_root_dir={tmp_path / 'data'}",
                                  f"datasets.vla_data.cache_dir={tmp_path / 'cache'}"])
    save_dataset_statistics(dataset_of(cfg).statistics(),
                            checkpoint.parents[1] / "dataset_statistics.json")
    args = ["--ckpt", str(checkpoint), "--data_root_dir", str(tmp_path / "data"), "--data_mix", "libero_all",
            "--episodes", "1", "--device", "cpu", "--cache_dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    env = {k: v for k, v in os.environ.items() if k != BASE_MODEL_ENV}
    refused = call_main(open_loop_main, args, env)
    assert refused.returncode == 2 and ELSEWHERE in refused.stderr and "--base_model" in refused.stderr
    result = call_main(open_loop_main, [*args, "--base_model", str(tiny_pipeline_dir)], env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert len(summary["episodes"]) == 1 and np.isfinite(summary["mse"])
