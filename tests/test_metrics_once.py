"""metrics.jsonl holds each step once across kills and resumes: the trim on resume, and a real kill -9 between a
metrics write and the save that would have covered it, followed by a resume."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from DiT4DiT.training.metrics import MetricsFileError, trim_metrics
from helpers.training_runs import ROOT, train_in_process, trainer_arguments

KILL_DURING_SAVE = ROOT / "tests" / "helpers" / "kill_during_save.py"


def test_records_after_the_resumed_step_and_the_closing_record_are_dropped(tmp_path):
    lines = ['{"step": 1, "total_loss": 1.0}', '{"step": 2, "total_loss": 0.9}', '{"step": 2, "eval_action_mse": 0.5}',
             '{"step": 3, "total_loss": 0.8}', '{"step": 3, "replica_weight_checksums": [1.0]}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    trim_metrics(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_text() == "\n".join(lines[:3]) + "\n"
    trim_metrics(tmp_path, 3)  # nothing beyond step 2 is left to drop
    assert (tmp_path / "metrics.jsonl").read_text() == "\n".join(lines[:3]) + "\n"


def test_a_cut_off_last_metrics_line_is_dropped_with_a_warning(tmp_path, caplog):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "tot')
    with caplog.at_level(logging.WARNING):
        trim_metrics(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert "dropped its last line, cut off when the run was killed" in caplog.text


def test_a_broken_line_in_the_middle_of_metrics_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(MetricsFileError, match=r"metrics\.jsonl, line 2: not valid JSON, and not the last line"):
        trim_metrics(tmp_path, 3)
    assert MetricsFileError.exit_code == 2


SIX_STEPS = ("--trainer.max_train_steps=6", "--trainer.save_interval=2", "--trainer.logging_frequency=1",
             "--trainer.eval_interval=3", "--trainer.num_warmup_steps=2")


def killed_during_save(write: int, pipeline: Path, data: Path, run_root: Path) -> subprocess.CompletedProcess:
    """The six-step run in a process that is killed (-9) inside its `write`-th file save."""
    command = [sys.executable, str(KILL_DURING_SAVE), str(write), *trainer_arguments(pipeline, data, run_root, "once",
                                                                                       *SIX_STEPS)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", OMP_NUM_THREADS="1")
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


# File saves, one process: 1-4 make step 2, 5-8 step 4, 9-12 step 6, 13 the final model.
# 5: step 4's metrics are written, its save is cut (resume from step 2); 13: step 6's metrics are written, the
# final model is cut before the closing record (resume from step 6, which writes both).
@pytest.mark.slow
@pytest.mark.parametrize("write", [5, 13])
def test_a_kill_between_a_metrics_write_and_a_save_leaves_each_step_once(tiny_pipeline_dir, tiny_robotwin_root,
                                                                         tmp_path, write):
    killed = killed_during_save(write, tiny_pipeline_dir, tiny_robotwin_root, tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before = [json.loads(line) for line in (tmp_path / "once/metrics.jsonl").read_text().splitlines()]
    resumed = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "once", *SIX_STEPS,
                               "--trainer.is_resume=true")  # the resume's own checks need no fresh process
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "once/metrics.jsonl").read_text().splitlines()]
    kinds = Counter((r["step"], next(k for k in ("total_loss", "eval_action_mse", "replica_weight_checksums") if k in r))
                    for r in records)
    expected = {(s, "total_loss") for s in range(1, 7)} | {(3, "eval_action_mse"), (6, "eval_action_mse"),
                                                          (6, "replica_weight_checksums")}
    assert set(kinds) == expected and set(kinds.values()) == {1}, kinds
    overlapped = {5: (4, "total_loss"), 13: (6, "total_loss")}[write]
    assert overlapped in {(r["step"], k) for r in before for k in r}, "the kill did not come after that metrics write"
