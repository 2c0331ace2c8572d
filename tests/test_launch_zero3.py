"""The DeepSpeed ZeRO-3 launch configuration (next to ZeRO-2): one CPU process trains and saves whole weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.cli_runs import run_tree
from DiT4DiT.config.schema import load_config
from DiT4DiT.model.framework import build_framework

ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def test_zero3_config_is_zero2_with_stage_3(tmp_path):
    zero2 = json.loads((ROOT / "DiT4DiT/config/deepseeds/ds_zero2.json").read_text())
    zero3 = json.loads((ROOT / "DiT4DiT/config/deepseeds/ds_zero3.json").read_text())
    assert zero3["zero_optimization"]["stage"] == 3 and zero3["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]
    assert {k: v for k, v in zero3.items() if k != "zero_optimization"} == {k: v for k, v in zero2.items()
                                                                           if k != "zero_optimization"}


@pytest.mark.slow
@pytest.mark.xdist_group("deepspeed")  # one worker: the shm op DeepSpeed compiles on CPU is built once
def test_zero3_trains_two_steps_and_saves_whole_weights(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    overrides = [f"--framework.cosmos25.base_model={tiny_pipeline_dir}", f"--datasets.vla_data.data_root_dir={tiny_robotwin_root}"]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        "DiT4DiT/config/deepseeds/deepspeed_zero3.yaml", "--num_processes", "1",
        "DiT4DiT/training/train.py", "--config_yaml", TINY_CONFIG, *overrides, f"--run_root_dir={tmp_path}",
        "--run_id=zero3", "--trackers=[jsonl]", "--datasets.vla_data.num_workers=0", "--trainer.max_train_steps=2",
        "--trainer.save_interval=2", "--trainer.logging_frequency=1",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", OMP_NUM_THREADS="1")
    result = run_tree(command, cwd=ROOT, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "zero3"
    assert (run / "checkpoints/steps_2_training_state/deepspeed").is_dir()
    losses = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in losses if "total_loss" in r] == [1, 2]
    # Under ZeRO-3 each process holds a shard; the saved file must still hold every trained tensor whole.
    weights = torch.load(run / "final_model/pytorch_model.pt", weights_only=True)
    model = build_framework(load_config(ROOT / TINY_CONFIG, [overrides[0][2:]]))
    expected = model.state_dict()
    assert weights and all(tuple(v.shape) == tuple(expected[k].shape) for k, v in weights.items())
    # No replicas to compare at the end: each weight is held once, in shards.
    assert "replicas not compared: ZeRO-3 keeps each weight once, in shards" in result.stderr
    assert not [r for r in losses if "replica_weight_checksums" in r]


@pytest.mark.slow
@pytest.mark.xdist_group("deepspeed")
def test_zero2_offload_preset_trains_and_saves(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    """The memory plan's ZeRO-2 preset with the optimizer state in host memory: the trainer's own AdamW steps the
    host's fp32 partition (zero_force_ds_cpu_optimizer off), and a training state is saved."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        "DiT4DiT/config/deepseeds/deepspeed_zero2_offload.yaml", "--num_processes", "1",
        "DiT4DiT/training/train.py", "--config_yaml", TINY_CONFIG,
        f"--framework.cosmos25.base_model={tiny_pipeline_dir}", f"--datasets.vla_data.data_root_dir={tiny_robotwin_root}",
        f"--run_root_dir={tmp_path}", "--run_id=offload", "--trackers=[jsonl]", "--datasets.vla_data.num_workers=0",
        "--trainer.max_train_steps=2", "--trainer.save_interval=2", "--trainer.logging_frequency=1",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", OMP_NUM_THREADS="1")
    result = run_tree(command, cwd=ROOT, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '"offload_optimizer": {' in result.stdout + result.stderr  # DeepSpeed's config dump
    run = tmp_path / "offload"
    assert (run / "checkpoints/steps_2_training_state/deepspeed").is_dir()
    losses = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in losses if "total_loss" in r] == [1, 2]


def test_the_prebuilt_deepspeed_op_is_current_for_the_ninja_the_tests_run():
    """`make test` builds DeepSpeed's CPU op once; a ninja that finds work to do would compile it in the first test."""
    folder = Path(sys.prefix) / "torch-extensions" / "deepspeed_shm_comm"
    if not folder.is_dir():
        pytest.skip("`make test` builds the op into the environment (Makefile: DS_SHM_OP)")
    result = subprocess.run(["ninja", "-n", "-d", "explain"], cwd=folder, capture_output=True, text=True)
    assert "no work to do" in result.stdout, result.stdout + result.stderr
