"""Closed-loop episodes over several environment processes (DiT4DiT/evaluation/parallel.py), with workers that need
no simulator (tests/helpers/eval_workers.py): the split, the merged results, a killed process retried once and
reported, a second death and a worker's own error ending the evaluation with one line."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.evaluation.parallel import WorkerError, blocks, check_num_envs, run_episodes
from DiT4DiT.host.process_lifetime import process_state
from helpers.cli_runs import descendants
from helpers.eval_workers import squares

ROOT = Path(__file__).resolve().parents[1]


def test_blocks_are_contiguous_cover_every_episode_once_and_differ_by_at_most_one():
    assert blocks(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert blocks(2, 4) == [range(0, 1), range(1, 2)]  # no empty block
    for count in range(1, 30):
        for parts in range(1, 8):
            found = blocks(count, parts)
            assert [e for block in found for e in block] == list(range(count))
            assert max(map(len, found)) - min(map(len, found)) <= 1
    assert check_num_envs(8, 3) == 3  # at most one process per episode
    with pytest.raises(BadArgument, match="--num_envs 0"):
        check_num_envs(0, 3)


def running(pid: int) -> bool:
    return process_state(pid) not in ("state unknown", "a zombie")


def assignments(count: int, parts: int) -> list[list[int]]:
    return [list(block) for block in blocks(count, parts)]


def test_results_of_several_processes_merge_by_episode(tmp_path):
    seen = []
    done = run_episodes(squares, {"marks": str(tmp_path)}, assignments(7, 3), on_result=lambda e, r: seen.append(e))
    assert done.results == {e: e * e for e in range(7)} and done.retried == []
    assert sorted(seen) == list(range(7))
    pids = {mark.name.split(".")[2] for mark in tmp_path.glob("pid.*")}
    assert len(pids) == 3  # three processes ran them


def test_one_process_runs_in_this_process(tmp_path):
    import os

    done = run_episodes(squares, {"marks": str(tmp_path)}, assignments(3, 1))
    assert done.results == {0: 0, 1: 1, 2: 4}
    assert {mark.name.split(".")[2] for mark in tmp_path.glob("pid.*")} == {str(os.getpid())}


def test_a_killed_process_is_reported_with_its_episode_and_its_unfinished_episodes_run_again(tmp_path, caplog):
    setup = {"marks": str(tmp_path), "crash_at": 5, "crashes": 1}
    with caplog.at_level(logging.WARNING, logger="dit4dit.parallel"):
        done = run_episodes(squares, setup, assignments(8, 2), describe=lambda e: f"{e} (seed {100 + e})")
    assert done.results == {e: e * e for e in range(8)} and done.retried == [5]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "killed by SIGKILL during episode 5 (seed 105); retrying its 3 unfinished episodes" in warnings[0]
    # Episode 4 finished before the crash and ran once; 5..7 ran again in a new process.
    assert len(list(tmp_path.glob("pid.4.*"))) == 1 and len(list(tmp_path.glob("pid.5.*"))) == 2
    assert len(list(tmp_path.glob("pid.7.*"))) == 1  # never reached before the crash


def test_an_episode_whose_process_dies_twice_ends_the_evaluation(tmp_path):
    setup = {"marks": str(tmp_path), "crash_at": 1, "crashes": 2}
    with pytest.raises(SimulatorError, match=r"killed by SIGKILL during episode 1 again, after a retry; that "
                                             r"episode has no result"):
        run_episodes(squares, setup, assignments(4, 2))


def test_a_workers_own_error_ends_the_evaluation_with_its_line_and_exit_code(tmp_path):
    with pytest.raises(WorkerError) as raised:
        run_episodes(squares, {"marks": str(tmp_path), "raise_at": 3}, assignments(4, 2))
    assert str(raised.value) == "environment process 1: episode 3 cannot run" and raised.value.exit_code == 2


def test_a_stopped_process_is_killed_named_and_its_unfinished_episodes_run_again(tmp_path, caplog):
    # Before, a process stopped by SIGSTOP held the evaluation forever (the wait for its next result had no end).
    setup = {"marks": str(tmp_path), "stop_at": 5, "stops": 1}
    with caplog.at_level(logging.WARNING, logger="dit4dit.parallel"):
        done = run_episodes(squares, setup, assignments(8, 2), describe=lambda e: f"{e} (seed {100 + e})", stall_s=2)
    assert done.results == {e: e * e for e in range(8)} and done.retried == [5]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert re.search(r"environment process 1 \(pid \d+\) made no progress for \d+ s \(stopped; killed\) during "
                     r"episode 5 \(seed 105\); retrying its 3 unfinished episodes", warning), warning


def test_an_episode_whose_process_stops_twice_ends_the_evaluation(tmp_path):
    with pytest.raises(SimulatorError, match=r"made no progress for \d+ s \(stopped; killed\) during episode 1 "
                                             r"again, after a retry"):
        run_episodes(squares, {"marks": str(tmp_path), "stop_at": 1, "stops": 2}, assignments(4, 2), stall_s=2)


@pytest.mark.slow
def test_environment_processes_die_with_the_evaluation(tmp_path):
    # Killing the evaluating process used to leave its environment processes (simulators) running.
    code = ("import sys; sys.path.insert(0, 'tests'); from helpers.eval_workers import squares; "
            "from DiT4DiT.evaluation.parallel import run_episodes; "
            f"run_episodes(squares, {{'marks': {str(tmp_path)!r}, 'hang_from': 0}}, [[0], [1], [2]])")
    evaluation = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    children = []
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pid.*"))) < 3 and time.monotonic() < deadline:  # every process started
            time.sleep(0.2)
        children = descendants(evaluation.pid)
        assert len(children) >= 3, children
        evaluation.kill()
        evaluation.wait()
        deadline = time.monotonic() + 30
        while any(map(running, children)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in children if running(pid)]
    finally:
        evaluation.kill()
        for pid in filter(running, children):  # what outlived it (the test failed): not left behind
            os.kill(pid, signal.SIGKILL)
