"""Metrics and the non-finite guard across two real processes (accelerate launch, gloo on the CPU)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from helpers.cli_runs import run_tree
from helpers.training_runs import rendezvous_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "workers"))

from reduce_metrics import rank_loss  # noqa: E402

pytestmark = pytest.mark.slow  # accelerate launch of two processes


def test_logged_values_are_the_mean_over_ranks_and_steps_plus_the_loss_maximum(tmp_path):
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               "DiT4DiT/config/deepseeds/cpu.yaml", "--num_processes", "2", *rendezvous_port(2),
               str(ROOT / "tests" / "workers" / "reduce_metrics.py"), str(tmp_path)]
    result = run_tree(command, cwd=ROOT, timeout=300,
                      env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]

    losses = [rank_loss(rank, step) for rank in (0, 1) for step in range(3)]
    for outcome in ranks:
        record = outcome["record"]
        assert math.isclose(record["total_loss"], sum(losses) / len(losses), rel_tol=1e-6)
        assert record["total_loss_max"] == max(losses)
        assert math.isclose(record["grad_norm"], 3.0, rel_tol=1e-6) and "grad_norm_max" not in record
        # Rank 1's micro-batch 1 was NaN: both ranks learn it; rank 0 reports its own (finite) values for it.
        assert outcome["with_nan"][0] == 1 and outcome["all_finite"] is None
    assert ranks[0]["with_nan"][1] == {"action_loss": 1.0}
    assert math.isnan(ranks[1]["with_nan"][1]["action_loss"])
