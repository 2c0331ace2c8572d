"""Waits around one-rank work (DiT4DiT/training/host_waits.py): the other ranks wait on a CPU (gloo) group with
trainer.one_rank_timeout_s, not on a device collective bounded by the collective timeout."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.cli_runs import run_tree
from helpers.training_runs import ROOT, environment, rendezvous_port, trainer_arguments

COLLECTIVE_TIMEOUT_S = 5
SLOW_S = 3 * COLLECTIVE_TIMEOUT_S


@pytest.mark.slow
def test_one_rank_work_longer_than_the_collective_timeout_does_not_fail_the_run(tiny_pipeline_dir, tiny_robotwin_root,
                                                                               tmp_path):
    """Two processes (gloo, as HCCL on a device) with a collective timeout of 5 s: the dataset index, rank 0's share
    of the prompt store and each weights file take 15 s more on the rank that does them. The run starts, trains,
    saves and ends."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", "DiT4DiT/config/deepseeds/cpu.yaml",
        "--num_processes", "2", *rendezvous_port(2), "tests/workers/slow_one_rank_work.py", str(SLOW_S),
        *trainer_arguments(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "slow",
                           f"--trainer.collective_timeout_s={COLLECTIVE_TIMEOUT_S}", "--trainer.stall_timeout_s=0",
                           "--trainer.max_train_steps=2", "--trainer.save_interval=2", "--trainer.logging_frequency=1"),
    ]
    result = run_tree(command, cwd=ROOT, env=environment(2), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "slow"
    assert (run / "checkpoints/steps_2_training_state").is_dir() and (run / "final_model/pytorch_model.pt").is_file()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "total_loss" in r] == [1, 2]
