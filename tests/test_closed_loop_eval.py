"""trainer.closed_loop_eval (DiT4DiT/training/closed_loop_eval.py) without a simulator: its config errors as bad-input
rows, the loss plot's second panel, and the end of a run waiting for or cancelling a side process that is still
running. The whole chain (a tiny Meta-World run whose side process serves its checkpoint and runs episodes) is
tests/test_closed_loop_metaworld.py::test_training_logs_closed_loop_success_rates_from_a_side_process."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from DiT4DiT.config.sections import TrainerClosedLoopEvalSection
from DiT4DiT.host.process_lifetime import process_state
from DiT4DiT.training.closed_loop_eval import ClosedLoopEvaluator
from DiT4DiT.training.metrics import plot_loss_curve
from helpers.bad_inputs import BadInput, check_bad_input

ROOT = Path(__file__).resolve().parents[1]
ON = ("--trainer.closed_loop_eval.interval=2", "--trainer.save_interval=2", "--trainer.max_train_steps=4",
      f"--trainer.closed_loop_eval.python={sys.executable}")
ROWS = [
    BadInput("interval not a multiple of save_interval", (*ON, "--trainer.closed_loop_eval.interval=3"), 2,
             ("trainer.closed_loop_eval.interval=3", "multiple of trainer.save_interval=2")),
    BadInput("no simulator python", (*ON, "--trainer.closed_loop_eval.python={tmp}/nowhere/python"), 2,
             ("trainer.closed_loop_eval.python", "nowhere/python' does not exist", "make sim-env")),
    BadInput("scene option out of range", (*ON, "--trainer.closed_loop_eval.evaluate_options='--image_size 0'"), 2,
             ("trainer.closed_loop_eval.evaluate_options='--image_size 0'", "render 16 to 480 pixels")),
    BadInput("not a scene option", (*ON, "--trainer.closed_loop_eval.evaluate_options='--episodes 5'"), 2,
             ("evaluate_options='--episodes 5'", "--episodes 5 is not a scene option", "--image_size")),
    BadInput("unknown task-side key", (*ON, "--trainer.closed_loop_eval.at_end=later"), 2,
             ("trainer.closed_loop_eval.at_end", "'later' is not one of")),
    # Taken as given before: a trillion episodes, a million OpenMP threads.
    BadInput("episodes 1e12", (*ON, "--trainer.closed_loop_eval.episodes=1e12"), 2,
             ("trainer.closed_loop_eval.episodes", "at most 10000, got 1000000000000")),
    BadInput("threads 1e6", (*ON, "--trainer.closed_loop_eval.threads=1e6"), 2,
             ("trainer.closed_loop_eval.threads", "at most 256, got 1000000")),
]


@pytest.mark.parametrize("case", ROWS, ids=str)
def test_bad_closed_loop_settings_are_one_line_before_anything_is_written(case, tmp_path, capsys):
    check_bad_input(case, tmp_path, capsys)


def test_the_loss_plot_gets_a_success_rate_panel_only_when_the_run_has_rates(tmp_path):
    from PIL import Image

    losses = [{"step": s, "total_loss": 1.0 / s, "action_loss": 0.5 / s} for s in range(1, 11)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in losses))
    one_panel = np.asarray(Image.open(plot_loss_curve(tmp_path)).convert("RGB"))
    rates = [{"step": 5, "closed_loop_success_rate": 0.2, "closed_loop_ci95_low": 0.06, "closed_loop_ci95_high": 0.51,
              "closed_loop_episodes": 10},
             {"step": 10, "closed_loop_success_rate": 0.7, "closed_loop_ci95_low": 0.4, "closed_loop_ci95_high": 0.89,
              "closed_loop_episodes": 10}]
    # Written as they arrive: a result comes after later steps' records.
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*losses[:7], rates[0], *losses[7:],
                                                                                    rates[1]]))
    two_panels = np.asarray(Image.open(plot_loss_curve(tmp_path)).convert("RGB"))
    assert two_panels.shape[0] > one_panel.shape[0] and two_panels.shape[1] == one_panel.shape[1]
    green = (two_panels[..., 1].astype(int) - np.maximum(two_panels[..., 0], two_panels[..., 2])) > 60
    rows = np.nonzero(green.any(axis=1))[0]
    assert rows.size and rows.min() > two_panels.shape[0] * 0.5  # the rates are drawn in the lower panel
    assert not ((one_panel[..., 1].astype(int) - np.maximum(one_panel[..., 0], one_panel[..., 2])) > 60).any()


def settings(**changes) -> TrainerClosedLoopEvalSection:
    values = dict(interval=2, task="handle-press-v3", episodes=2, max_steps=10, seed=1000, num_envs=1, device="cpu",
                  threads=1, python=sys.executable, evaluate_options="", at_end="wait")
    return TrainerClosedLoopEvalSection(**{**values, **changes})


def still_running(evaluator: ClosedLoopEvaluator, tmp_path, step: int) -> subprocess.Popen:
    """A side process that outlives the run: a session of its own with a child, as the real one has its server."""
    process = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.call(['sleep', '300'])"],
                               start_new_session=True)
    evaluator.running = step, process, tmp_path, time.monotonic()
    return process


def session_members(session: int) -> list[int]:
    found = []
    for stat in os.listdir("/proc"):
        if stat.isdigit():
            try:
                with open(f"/proc/{stat}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                found.append(int(stat))
    return found


@pytest.mark.parametrize("at_end, failed, reason", [
    ("cancel", False, "trainer.closed_loop_eval.at_end=cancel"),
    ("wait", True, "the run stopped early"),
    ("wait", False, "not done within 1 s, 80% of trainer.collective_timeout_s"),
])
def test_an_evaluation_still_running_at_the_end_is_cancelled_with_a_line(tmp_path, caplog, at_end, failed, reason):
    recorded = []
    evaluator = ClosedLoopEvaluator(settings(at_end=at_end), tmp_path, 4, recorded.append, wait_limit_s=1)
    process = still_running(evaluator, tmp_path, 4)
    with caplog.at_level(logging.INFO, logger="dit4dit.closed_loop"):
        evaluator.close(*((RuntimeError, RuntimeError("x"), None) if failed else (None, None, None)))
    assert process.poll() is not None
    deadline = time.monotonic() + 30  # the child, sent SIGTERM with it, ends a moment later
    while session_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not session_members(process.pid)
    assert f"cancelled the closed-loop evaluation of step 4 ({reason})" in caplog.text
    assert ("waiting for the closed-loop evaluation of step 4" in caplog.text) == (at_end == "wait" and not failed)
    assert recorded == [] and evaluator.running is None


def test_a_due_step_while_an_evaluation_runs_is_skipped_with_a_line(tmp_path, caplog):
    recorded = []
    evaluator = ClosedLoopEvaluator(settings(), tmp_path, 10, recorded.append, wait_limit_s=1)
    process = still_running(evaluator, tmp_path, 2)
    try:
        with caplog.at_level(logging.WARNING, logger="dit4dit.closed_loop"):
            evaluator.step(3)  # not due
            evaluator.step(4)
        assert "closed-loop evaluation of step 2 still running: step 4's checkpoint is not evaluated" in caplog.text
        assert evaluator.running[0] == 2
    finally:
        os.killpg(process.pid, 9)
        process.wait()



def side_process_tree(tmp_path, *, exit_code: int = 0, summary: str | None = None) -> subprocess.Popen:
    """A side process as the trainer starts one (a session of its own) with a child, as the real one has its server;
    it writes `summary` to summary.json and exits `exit_code` at once, or, without a summary, runs until ended."""
    code = ("import pathlib, subprocess, sys\n"
            "child = subprocess.Popen(['sleep', '300'])\n"
            f"pathlib.Path({str(tmp_path / 'child.pid')!r}).write_text(str(child.pid))\n")
    if summary is not None:
        code += f"pathlib.Path({str(tmp_path / 'summary.json')!r}).write_text({summary!r})\nsys.exit({exit_code})\n"
    else:
        code += "child.wait()\n"
    (tmp_path / "side_process.log").write_text("")
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "child.pid").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    return process


def stop(process: subprocess.Popen) -> None:
    """SIGSTOP, returning once the process is stopped."""
    os.kill(process.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while process_state(process.pid) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.01)


def gone(session: int, within_s: float = 30) -> bool:
    deadline = time.monotonic() + within_s
    while session_members(session) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not session_members(session)


GOOD_SUMMARY = {"task": "handle-press-v3", "episodes": 2, "successes": 1, "success_rate": 0.5, "ci95": [0.09, 0.91]}


@pytest.mark.parametrize("text, problem", [
    ("{not json", "is not readable JSON (JSONDecodeError"),
    ("[1, 2]", "a list, not a map"),
    (json.dumps({**GOOD_SUMMARY, "ci95": [0.1]}), "'ci95' is [0.1], not two numbers from 0 to 1"),
    (json.dumps({**GOOD_SUMMARY, "success_rate": float("nan")}), "'success_rate' is nan, not a number from 0 to 1"),
    (json.dumps({k: v for k, v in GOOD_SUMMARY.items() if k != "episodes"}), "'episodes' is None"),
])
def test_a_summary_the_trainer_cannot_read_is_a_line_and_training_goes_on(tmp_path, caplog, text, problem):
    # A malformed summary.json crashed the trainer with a JSONDecodeError (or KeyError) traceback.
    recorded = []
    evaluator = ClosedLoopEvaluator(settings(), tmp_path, 10, recorded.append, wait_limit_s=1)
    process = side_process_tree(tmp_path, summary=text)
    evaluator.running = 2, process, tmp_path, time.monotonic()
    process.wait()
    with caplog.at_level(logging.WARNING, logger="dit4dit.closed_loop"):
        evaluator.collect()
    assert f"closed-loop evaluation of step 2: {tmp_path / 'summary.json'}" in caplog.text
    assert problem in caplog.text and "no result recorded for that step" in caplog.text
    assert recorded == [] and evaluator.running is None
    assert gone(process.pid)  # what it had started is ended too


def test_a_killed_side_process_is_named_and_what_it_started_ends(tmp_path, caplog):
    # Killing the side process orphaned its policy server (7-9 GiB at full size) for good.
    evaluator = ClosedLoopEvaluator(settings(), tmp_path, 10, [].append, wait_limit_s=1)
    process = side_process_tree(tmp_path)
    evaluator.running = 2, process, tmp_path, time.monotonic()
    process.kill()
    deadline = time.monotonic() + 30
    while evaluator.running is not None and time.monotonic() < deadline:
        with caplog.at_level(logging.WARNING, logger="dit4dit.closed_loop"):
            evaluator.collect()
        time.sleep(0.1)
    assert "closed-loop evaluation of step 2 failed (killed by SIGKILL)" in caplog.text
    assert gone(process.pid)


def test_a_stopped_side_process_is_ended_past_its_timeout_and_the_next_evaluation_starts(tmp_path, caplog):
    # A side process stopped by SIGSTOP was "still running" for the rest of the run: no evaluation again, and at
    # the end the trainer waited for it forever.
    evaluator = ClosedLoopEvaluator(settings(timeout_s=1), tmp_path, 10, [].append, wait_limit_s=1)
    process = side_process_tree(tmp_path)
    stop(process)
    started = []
    evaluator.start = started.append  # the next evaluation, as step() starts it
    evaluator.running = 2, process, tmp_path, time.monotonic() - 2
    with caplog.at_level(logging.WARNING, logger="dit4dit.closed_loop"):
        evaluator.step(4)
    assert re.search(r"closed-loop evaluation of step 2 ended after \d+ s, past trainer.closed_loop_eval.timeout_s=1 "
                     rf"\(side process pid {process.pid} stopped\)", caplog.text), caplog.text
    assert gone(process.pid) and started == [4]


@pytest.mark.parametrize("at_end", ["cancel", "wait"])
def test_the_end_of_a_run_never_waits_for_a_stopped_side_process(tmp_path, at_end):
    evaluator = ClosedLoopEvaluator(settings(at_end=at_end), tmp_path, 4, [].append, wait_limit_s=1)
    process = side_process_tree(tmp_path)
    stop(process)
    evaluator.running = 4, process, tmp_path, time.monotonic()
    closing = threading.Thread(target=evaluator.close, daemon=True)
    closing.start()
    closing.join(timeout=120)  # SIGTERM cannot end a stopped process: SIGKILL after the grace does
    try:
        assert not closing.is_alive() and gone(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGKILL)


# -- where the side process runs ------------------------------------------------------------------------------------

FAKE_BIN = ROOT / "tests" / "fakes" / "bin"
FAKE_NVIDIA = ROOT / "tests" / "fakes" / "nvidia_bin"


@pytest.fixture
def a3_host(monkeypatch):
    """A fake 16-die Atlas 800T A3 node (npu-smi), training processes set per test with LOCAL_WORLD_SIZE."""
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPU_SMI_LAYOUT", "a3")
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    return monkeypatch


def test_auto_on_a_node_whose_dies_all_train_is_refused_with_one_line(a3_host, tmp_path, capsys):
    """16 processes on the 16 dies of an A3 node and device auto: before anything is written, one line says why
    and what to set, on the real trainer entry."""
    a3_host.setenv("LOCAL_WORLD_SIZE", "16")
    row = BadInput("every die trains", (*ON, "--trainer.closed_loop_eval.device=auto"), 2,
                   ("trainer.closed_loop_eval.device=auto", "16 training processes on this node use all 16 visible "
                    "NPU dies", "share NPU die 0 with rank 0", "trainer.closed_loop_eval.device_id",
                    "ASCEND_RT_VISIBLE_DEVICES", "device=cpu"))
    check_bad_input(row, tmp_path, capsys)


@pytest.mark.parametrize("device_id, words", [
    (3, ("device_id=3", "training process 3 of this node uses that NPU die", "ASCEND_RT_VISIBLE_DEVICES")),
    (16, ("device_id=16", "this host has 16 NPU dies (0-15)")),
], ids=["a training die", "no such die"])
def test_a_named_die_that_trains_or_does_not_exist_is_refused(a3_host, device_id, words):
    from DiT4DiT.config.errors import ConfigError
    from DiT4DiT.training.closed_loop_eval import side_process_devices

    with pytest.raises(ConfigError) as raised:
        side_process_devices(settings(device="npu", device_id=device_id), 16)
    assert all(word in str(raised.value) for word in words), str(raised.value)


def test_the_side_process_gets_a_free_die_or_the_named_one(a3_host):
    from DiT4DiT.training.closed_loop_eval import side_process_devices

    # 15 processes on 16 visible dies: the first one they leave
    assert side_process_devices(settings(device="auto"), 15) == {"ASCEND_RT_VISIBLE_DEVICES": "15"}
    # training sees dies 1-15 (ASCEND_RT_VISIBLE_DEVICES), 15 processes: die 0 is free and may be named
    a3_host.setenv("ASCEND_RT_VISIBLE_DEVICES", ",".join(map(str, range(1, 16))))
    assert side_process_devices(settings(device="npu", device_id=0), 15) == {"ASCEND_RT_VISIBLE_DEVICES": "0"}
    assert side_process_devices(settings(device="cpu"), 15) == {}


def test_gpus_are_placed_the_same_way(monkeypatch):
    """A node of 8 GPUs (fake nvidia-smi, no npu-smi): 8 processes leave none; 7 leave GPU 7."""
    from DiT4DiT.config.errors import ConfigError
    from DiT4DiT.training.closed_loop_eval import side_process_devices

    monkeypatch.setenv("PATH", f"{FAKE_NVIDIA}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ConfigError, match="the 8 training processes on this node use all 8 visible GPUs"):
        side_process_devices(settings(device="cuda"), 8)
    assert side_process_devices(settings(device="auto"), 7) == {"CUDA_VISIBLE_DEVICES": "7"}


@pytest.mark.slow  # starts the side process
def test_the_side_process_sees_only_the_named_die_and_every_core(a3_host, tmp_path):
    """The evaluator starts the real side process (its checkpoint is missing, so its server stops at once): its
    first line shows the one die it sees and its CPU affinity reset to the whole machine, though the trainer's
    process was bound to one core."""
    from DiT4DiT.training.closed_loop_eval import side_process_devices

    a3_host.setenv("ASCEND_RT_VISIBLE_DEVICES", ",".join(map(str, range(15))))
    chosen = settings(device="npu", device_id=15)
    evaluator = ClosedLoopEvaluator(chosen, tmp_path, 2, [].append, wait_limit_s=1,
                                    devices=side_process_devices(chosen, 15))
    (tmp_path / "checkpoints").mkdir()
    bound = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(bound)})
    try:
        evaluator.start(2)
    finally:
        os.sched_setaffinity(0, bound)
    step, process, out, _ = evaluator.running
    process.wait(timeout=300)
    log = (out / "side_process.log").read_text()
    cores = os.cpu_count()
    assert f"closed-loop side process: devices ASCEND_RT_VISIBLE_DEVICES=15; CPU affinity: {cores} cores (was 1)" in log
