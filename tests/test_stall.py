"""A stalled rank is named by the others, which exit with EXIT_STALLED: the heartbeat on a real store, then a
real 2-rank `accelerate launch` (gloo on CPU) with one rank stopped by SIGSTOP."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from DiT4DiT.training.heartbeat import EXIT_STALLED, Heartbeat, RankStalled

ROOT = Path(__file__).resolve().parents[1]


def watcher(store, rank=0, world_size=2, timeout=1.5):
    stalls: list[RankStalled] = []
    reported = threading.Event()

    def on_stall(error):
        stalls.append(error)
        reported.set()

    return Heartbeat(store, rank, world_size, timeout, on_stall=on_stall), stalls, reported


def test_a_rank_that_went_silent_is_named_with_its_host_and_last_step():
    store = dist.HashStore()
    store.set("dit4dit/heartbeat/1", "7 41 node-b running")  # rank 1 beat once, at step 41, then nothing
    beat, stalls, reported = watcher(store)
    beat.start()
    try:
        assert reported.wait(10), "the silent rank was never reported"
    finally:
        beat.stop()
    message = str(stalls[0])
    assert re.search(r"rank 1 on host node-b has made no progress for \d+ s \(last step 41\)", message), message
    assert stalls[0].exit_code == EXIT_STALLED


def test_live_and_finished_ranks_are_not_reported():
    store = dist.HashStore()
    first, first_stalls, _ = watcher(store, rank=0)
    second, second_stalls, _ = watcher(store, rank=1)
    first.start(), second.start()
    for step in range(30):  # 3 s: twice the timeout
        first.step = second.step = step
        time.sleep(0.1)
    second.stop()  # leaves the loop, e.g. done while rank 0 still writes the final model
    time.sleep(2.5)
    first.stop()
    assert first_stalls == [] and second_stalls == []
    assert store.get("dit4dit/heartbeat/1").decode().endswith(" 29 " + second.host + " finished")


def rank_pids(launcher: int) -> dict[int, int]:
    """RANK -> pid of every trainer process started under `launcher` (their environment names the rank)."""
    found = {}
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            variables = dict(v.split("=", 1) for v in environ.read_text().split("\0") if "=" in v)
            parent = int(environ.with_name("stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if "RANK" in variables and parent == launcher:  # torchrun's agent runs inside the launcher process
            found[int(variables["RANK"])] = int(environ.parent.name)
    return found


def pending_signals(pid: int) -> int:
    """The signals waiting for `pid` (its own and its thread group's), as a bit mask: bit n-1 is signal n."""
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)


@pytest.mark.slow
def test_a_stopped_rank_ends_the_job_within_the_stall_timeout(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    timeout = 10
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", "DiT4DiT/config/deepseeds/cpu.yaml",
        "--num_processes", "2", "DiT4DiT/training/train.py", "--config_yaml", "DiT4DiT/config/tiny/dit4dit_tiny.yaml",
        f"--framework.cosmos25.base_model={tiny_pipeline_dir}", f"--datasets.vla_data.data_root_dir={tiny_robotwin_root}",
        f"--run_root_dir={tmp_path}", "--run_id=stall", "--trackers=[jsonl]", f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}",
        "--datasets.vla_data.num_workers=0", "--trainer.max_train_steps=10000", "--trainer.logging_frequency=1",
        f"--trainer.stall_timeout_s={timeout}", "--trainer.collective_timeout_s=600",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", OMP_NUM_THREADS="1")
    log = tmp_path / "launch.log"
    with open(log, "w") as out:
        launch = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    ranks: dict[int, int] = {}
    try:
        metrics = tmp_path / "stall/metrics.jsonl"
        deadline = time.monotonic() + 600
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert launch.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        ranks = rank_pids(launch.pid)
        assert sorted(ranks) == [0, 1], ranks
        os.kill(ranks[1], signal.SIGSTOP)
        stopped = time.monotonic()
        while Path(f"/proc/{ranks[0]}").exists() and "zombie" not in Path(f"/proc/{ranks[0]}/status").read_text():
            assert time.monotonic() - stopped < timeout + 30, "the healthy rank is still waiting"
            time.sleep(0.2)
        detected = time.monotonic() - stopped
        # torchrun now sends the stopped rank SIGTERM and kills it only after a 30 s grace: a stopped process cannot
        # act on the signal. Once it is pending, end the rank as that grace would, without the wait.
        while not pending_signals(ranks[1]) & (1 << (signal.SIGTERM - 1)):
            assert launch.poll() is None and time.monotonic() - stopped < timeout + 90, log.read_text()[-3000:]
            time.sleep(0.1)
        os.kill(ranks[1], signal.SIGKILL)
        launch.wait(120)
    finally:  # the workers run in sessions of their own: each is ended by its pid
        for pid in [*ranks.values(), launch.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launch.wait()
    text = log.read_text()
    assert re.search(r"\[rank 0\] RankStalled: rank 1 on host \S+ has made no progress for \d+ s \(last step \d+\)", text), text[-3000:]
    assert re.search(rf"rank\s*: 0 .*\n\s*exitcode\s*: {EXIT_STALLED} ", text), text[-3000:]
    print(f"stall detected after {detected:.1f} s (stall_timeout_s={timeout})")
