"""A stalled rank is named by the others, which exit with EXIT_STALLED and end it: the heartbeat on a real store,
a rank whose agent died, a store that is not torch's, then the real launcher (2 ranks on one node, and one rank on
each of two "nodes") with one rank stopped by SIGSTOP: the job ends with 76 and the last saved state intact."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from DiT4DiT.training import checkpoint as ckpt
from DiT4DiT.training.heartbeat import EXIT_STALLED, Heartbeat, RankStalled, beat_fields, heartbeat_store
from helpers.cli_runs import free_port
from helpers.launcher_runs import LAUNCHER, ROOT, launcher_env


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
    assert beat_fields(store.get("dit4dit/heartbeat/1").decode())[1:5] == ["29", second.host, "finished", "0"]


@pytest.mark.parametrize("node, killed", [("0", 4242), ("1", None)])
def test_only_a_stalled_rank_under_this_ranks_agent_is_given_to_kill(node, killed):
    store = dist.HashStore()
    beat, stalls, reported = watcher(store)
    store.set("dit4dit/heartbeat/1", f"3 5 {beat.host} running {node} 4242")  # same host; node 1: another agent
    beat.start()
    try:
        assert reported.wait(10)
    finally:
        beat.stop()
    assert stalls[0].sibling_pid == killed


ORPHAN = textwrap.dedent("""
    import os, signal, sys, threading, time
    import torch.distributed as dist
    from DiT4DiT.training.heartbeat import Heartbeat
    from DiT4DiT.training.preemption import EXIT_PREEMPTED, StopSignal

    if os.fork():  # this process plays torchrun's agent; the child, its rank
        time.sleep(600)
    store = dist.HashStore()
    stop = StopSignal().install()
    beat = Heartbeat(store, 0, 2, 30.0).start()
    def peer():  # a live rank 1, so only the agent's death can end this rank
        while True:
            store.set("dit4dit/heartbeat/1", f"{time.monotonic()} 0 elsewhere running 1 1")
            time.sleep(0.5)
    threading.Thread(target=peer, daemon=True).start()
    print(os.getpid(), flush=True)
    for step in range(1, 100000):  # the training loop: a stop at a step boundary saves and leaves with 75
        time.sleep(0.05)
        if stop.agreed():
            open(sys.argv[1], "w").write(f"saved after step {step}")
            os._exit(EXIT_PREEMPTED)
""")


def test_a_rank_whose_agent_died_saves_and_stops_instead_of_training_on(tmp_path):
    marker = tmp_path / "saved"
    agent = subprocess.Popen([sys.executable, "-c", ORPHAN, str(marker)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    rank = int(agent.stdout.readline())
    try:
        os.kill(agent.pid, signal.SIGKILL)  # as a scheduler's OOM killer or a crash would
        agent.wait()
        deadline = time.monotonic() + 120  # the stall timeout is 30 s: a stop before it comes from the agent's death
        while not gone(rank):
            assert time.monotonic() < deadline, "the orphaned rank trains on"
            time.sleep(0.1)
    finally:
        if not gone(rank):
            os.kill(rank, signal.SIGKILL)
    assert marker.read_text().startswith("saved after step")
    assert "the launching agent (torchrun) is gone" in agent.stderr.read()


def test_a_store_that_is_not_torchs_turns_the_stall_watch_off_with_a_warning(caplog):
    from fakes.parallel_store import FakeParallelStore

    with FakeParallelStore() as fake, caplog.at_level(logging.WARNING):
        store = heartbeat_store("127.0.0.1", fake.port, timedelta(seconds=5), "dit4dit/heartbeat/0")
    assert store is None
    assert "stall watch off: no store client on the rendezvous port 127.0.0.1:" in caplog.text
    assert "trainer.collective_timeout_s" in caplog.text
    assert not Heartbeat(store, 0, 2, 10).active  # the run goes on, watched by the collective timeout only


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def rank_pids(launcher: int) -> dict[int, int]:
    """RANK -> pid of every trainer process of the launcher script `launcher`: the children of its accelerate
    process (torchrun's agent runs inside it), whose environment names the rank."""
    found = {}
    for agent in children(launcher):
        for pid in children(agent):
            try:
                variables = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
            except OSError:
                continue
            if "RANK" in variables:
                found[int(variables["RANK"])] = pid
    return found


def gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def stall_options(timeout: int, tiny_pipeline_dir: Path, tiny_robotwin_root: Path, runs: Path) -> list[str]:
    return [f"--base_model={tiny_pipeline_dir}", f"--data_root_dir={tiny_robotwin_root}", f"--run_root_dir={runs}",
            "--run_id=stall", "--trackers=[jsonl]", f"--datasets.vla_data.cache_dir={runs / 'cache'}",
            "--datasets.vla_data.num_workers=0", "--max_train_steps=10000", "--trainer.logging_frequency=1",
            "--trainer.save_interval=2", f"--trainer.stall_timeout_s={timeout}", "--trainer.collective_timeout_s=600"]


LIMIT_S = 600


def end_job(launcher: subprocess.Popen) -> str:
    """The launcher's output, after ending whatever of its job still runs: its trainer has a session of its own, and
    torchrun starts each rank in another (a stopped rank would hold the log's pipe, and so this call, forever)."""
    if launcher.poll() is None:
        for agent in children(launcher.pid):
            for pid in [*children(agent), agent]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        launcher.kill()
    return launcher.communicate()[0]


def stop_a_rank_and_watch(launchers: list[subprocess.Popen], run_dir: Path, victim: int, logs: list[Path]) -> dict:
    """After two steps and a saved state, SIGSTOP rank `victim`; seconds from the stop until the named line,
    each launcher's exit, and the stopped process gone (a zombie counts: it no longer runs), for what happened
    within LIMIT_S."""
    deadline = time.monotonic() + 900
    while not (ckpt.completed_states(run_dir / "checkpoints") and len(steps_logged(run_dir)) >= 3):
        assert all(p.poll() is None for p in launchers) and time.monotonic() < deadline, logs[0].read_text()[-3000:]
        time.sleep(0.2)
    ranks = {}
    for launcher in launchers:
        ranks |= rank_pids(launcher.pid)
    assert sorted(ranks) == [0, 1], ranks
    os.kill(ranks[victim], signal.SIGSTOP)
    stopped, times = time.monotonic(), {}
    while len(times) < len(launchers) + 2 and time.monotonic() - stopped < LIMIT_S:  # a deadline, not a measure
        elapsed = time.monotonic() - stopped
        if "named" not in times and "RankStalled: rank" in "".join(log.read_text() for log in logs if log.exists()):
            times["named"] = elapsed
        if "stopped rank gone" not in times and gone(ranks[victim]):
            times["stopped rank gone"] = elapsed
        for number, launcher in enumerate(launchers):
            if f"launcher {number} exit" not in times and launcher.poll() is not None:
                times[f"launcher {number} exit"] = elapsed
        time.sleep(0.1)
    return times


def steps_logged(run_dir: Path) -> list[int]:
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return [json.loads(line)["step"] for line in lines if '"total_loss"' in line]


def assert_last_state_intact(run_dir: Path) -> None:
    state = ckpt.completed_states(run_dir / "checkpoints")[-1]
    assert [ckpt.verify_share(state, rank, 2) for rank in (0, 1)] == [[], []], state


@pytest.mark.slow
def test_a_stopped_rank_ends_the_launchers_job_with_76(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    timeout = 10
    run_dir = tmp_path / "stall"
    launcher = subprocess.Popen(["bash", str(LAUNCHER), "--num_processes=2",
                                 *stall_options(timeout, tiny_pipeline_dir, tiny_robotwin_root, tmp_path)],
                                cwd=ROOT, env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        times = stop_a_rank_and_watch([launcher], run_dir, 1, [run_dir / "train.log"])
    finally:
        output = end_job(launcher)
    print(f"one node, 2 ranks, stall_timeout_s={timeout}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    text = (run_dir / "train.log").read_text()
    assert len(times) == 3 and launcher.returncode == EXIT_STALLED, output[-3000:]
    assert re.search(r"\[rank 0\] RankStalled: rank 1 on host \S+ has made no progress for \d+ s \(last step \d+\)", text), text[-3000:]
    # Killed by rank 0, right after the named line (not by torchrun after its 30 s grace, nor by the launcher)
    assert re.search(r"\[rank 0\] sent SIGKILL to the stalled rank's process \d+", text), text[-3000:]
    assert "train_8p.sh: SIGKILL" not in text and text.rstrip().endswith(f"=== exit code {EXIT_STALLED}")
    assert_last_state_intact(run_dir)


@pytest.mark.slow
def test_a_stopped_rank_alone_on_its_node_is_ended_by_that_nodes_launcher(tiny_pipeline_dir, tiny_robotwin_root,
                                                                         tmp_path):
    timeout = 10
    run_dir, port = tmp_path / "stall", free_port()
    launchers = [subprocess.Popen(["bash", str(LAUNCHER), "--num_machines=2", f"--machine_rank={node}",
                                   "--num_processes=1", "--main_process_ip=127.0.0.1", f"--main_process_port={port}",
                                   "--net_if=lo", *stall_options(timeout, tiny_pipeline_dir, tiny_robotwin_root, tmp_path)],
                                  cwd=ROOT, env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for node in (0, 1)]
    try:
        times = stop_a_rank_and_watch(launchers, run_dir, 1, [run_dir / "train.log", run_dir / "train.node1.log"])
    finally:
        outputs = [end_job(launcher) for launcher in launchers]
    print(f"two nodes, 1 rank each, stall_timeout_s={timeout}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    node0, node1 = (run_dir / "train.log").read_text(), (run_dir / "train.node1.log").read_text()
    assert len(times) == 4, times
    assert [launcher.returncode for launcher in launchers] == [EXIT_STALLED, EXIT_STALLED], [o[-2000:] for o in outputs]
    assert re.search(r"\[rank 0\] RankStalled: rank 1 on host \S+", node0), node0[-3000:]
    assert "sent SIGKILL" not in node0  # rank 1 runs under another node's agent: not rank 0's to kill
    assert re.search(r"train_8p.sh: SIGKILL to rank process \d+: stopped for \d+ s", node1), node1[-3000:]
    assert_last_state_intact(run_dir)
