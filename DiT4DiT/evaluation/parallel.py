"""Closed-loop episodes spread over N simulator processes, with results identical to a serial run's.

A simulator adapter gives a worker `worker(setup, episodes, report)`: it builds its own simulator from `setup`
(picklable), runs the listed episode numbers in order and calls `report(episode, result)` after each. The
adapter makes an episode's result depend on its number alone (its seed, its initial state), never on the process
that ran it or on what ran before, so merging by episode number gives the serial run's table whatever N.

Each process gets one contiguous block of the episode numbers (`blocks`). A process that dies (a signal, a
segfault in the simulator, the OOM killer) is reported with the episode it had not finished, and its unfinished
episodes run again in a new process; an episode whose process dies twice ends the evaluation with that line.
A process that stops making progress (stopped by SIGSTOP, frozen holding the interpreter) counts as dying: a thread
in each process sends a beat every few seconds, and one silent for `stall_s` (STALL_S) is killed, named, and
retried the same way. A process waiting on the policy server keeps beating: the server's and the client's own
timeouts bound that wait. A worker's own error (a DiT4DiTError: a server gone, a bad task) ends the evaluation at
once: a new process would fail alike. Environment processes die with the evaluation (process_lifetime).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.host.process_lifetime import how_it_ended, process_state

log = logging.getLogger("dit4dit.parallel")

# An environment process silent this long (no result, no beat) is stuck; a beat every STALL_S / BEATS_PER_STALL.
# Before its first beat it may be silent STARTS_PER_STALL times longer: a spawned process imports its worker's
# module (a simulator's packages) before it runs anything of ours.
STALL_S = 60.0
BEATS_PER_STALL = 6
STARTS_PER_STALL = 10

Worker = Callable[[Any, list[int], Callable[[int, Any], None]], None]


class WorkerError(DiT4DiTError):
    """An environment process's own error, with that error's exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Episodes:
    """Every episode's result by number, and the episodes whose process died once (run again in a new one)."""

    results: dict[int, Any] = field(default_factory=dict)
    retried: list[int] = field(default_factory=list)


def check_num_envs(num_envs: int, episodes: int) -> int:
    """The processes to start: --num_envs, at most one per episode."""
    if num_envs < 1:
        raise BadArgument(f"--num_envs {num_envs}: run at least 1 environment process")
    return min(num_envs, episodes)


def blocks(count: int, parts: int) -> list[range]:
    """0..count-1 as `parts` contiguous runs whose lengths differ by at most one (the longer ones first)."""
    size, longer = divmod(count, parts)
    starts = [p * size + min(p, longer) for p in range(parts + 1)]
    return [range(starts[p], starts[p + 1]) for p in range(parts) if starts[p + 1] > starts[p]]


def _child(worker: Worker, setup, episodes: list[int], results, parent: int, beat_s: float) -> None:
    """An environment process: each result goes into the pipe as its episode ends (send() returns once it is
    there, so a kill a moment later loses no finished episode), and a beat every `beat_s` while it runs."""
    from DiT4DiT.logging_setup import configure_logging
    from DiT4DiT.host.process_lifetime import die_with_parent

    die_with_parent(parent)
    configure_logging()
    sending, done = threading.Lock(), threading.Event()

    def send(message: tuple) -> None:
        with sending:  # the beat thread and the worker share the pipe
            results.send(message)

    def beat() -> None:
        while True:
            send(("beat",))
            if done.wait(beat_s):
                return

    threading.Thread(target=beat, name="beat", daemon=True).start()
    try:
        worker(setup, episodes, lambda episode, result: send(("result", episode, result)))
    except DiT4DiTError as error:
        send(("error", str(error), error.exit_code))
    except Exception as error:  # a simulator's own exception: one line to the parent, which ends the evaluation
        send(("error", f"{type(error).__name__}: {error}", 1))
    done.set()
    with sending:
        results.close()


def run_episodes(worker: Worker, setup, assignments: Sequence[Sequence[int]], *, describe: Callable[[int], str] = str,
                 on_result: Callable[[int, Any], None] | None = None, stall_s: float = STALL_S) -> Episodes:
    """The result of every episode in `assignments` (one list of episode numbers per process, run in order).

    One assignment runs in this process; more run in spawned processes (their simulators never share a GL context
    or a module's state). `describe(episode)` names an episode in the crash lines; `on_result` sees each result as
    it arrives, in arrival order; a process silent for `stall_s` is killed and counts as dying.
    """
    done = Episodes()

    def accept(episode: int, result) -> None:
        done.results[episode] = result
        if on_result is not None:
            on_result(episode, result)

    if len(assignments) == 1:
        worker(setup, list(assignments[0]), accept)
        return done
    context = multiprocessing.get_context("spawn")
    pending = {slot: list(episodes) for slot, episodes in enumerate(assignments)}
    # slot -> (process, the end we read)
    processes: dict[int, tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]] = {}
    heard: dict[int, float] = {}  # slot -> when its process last sent something
    started: set[int] = set()  # slots whose process has sent something
    stuck: dict[int, str] = {}  # slot -> how its process was found stuck (it was killed for it)

    def start(slot: int) -> None:
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(worker, setup, pending[slot], writer, os.getpid(),
                                                        stall_s / BEATS_PER_STALL), daemon=True)
        process.start()
        writer.close()  # the child's copy stays open: its end (exit, kill) is the reader's EOF
        processes[slot] = process, reader
        heard[slot] = time.monotonic()
        started.discard(slot)
        log.info("environment process %d (pid %d): episodes %s..%s", slot, process.pid, describe(pending[slot][0]),
                 describe(pending[slot][-1]))

    def ended(slot: int) -> None:
        """The process's pipe is closed: it finished, or died before finishing pending[slot][0]."""
        process, reader = processes.pop(slot)
        reader.close()
        process.join()
        if not pending[slot]:
            return
        episode, how = pending[slot][0], stuck.pop(slot, None) or how_it_ended(process.exitcode)
        if episode in done.retried:
            raise SimulatorError(f"environment process {slot} (pid {process.pid}) {how} during episode "
                                 f"{describe(episode)} again, after a retry; that episode has no result")
        done.retried.append(episode)
        log.warning("environment process %d (pid %d) %s during episode %s; retrying its %d unfinished episodes in "
                    "a new process", slot, process.pid, how, describe(episode), len(pending[slot]))
        start(slot)

    try:
        for slot in pending:
            start(slot)
        while processes:
            # each end's slot, looked up with what wait() hands back (the ends it was given, typed as any waitable)
            readers: dict[object, int] = {reader: slot for slot, (_, reader) in processes.items()}
            ends = [reader for _, reader in processes.values()]
            for ready in multiprocessing.connection.wait(ends, timeout=stall_s / BEATS_PER_STALL):
                slot = readers[ready]
                _, reader = processes[slot]
                heard[slot] = time.monotonic()
                started.add(slot)
                try:
                    message = reader.recv()
                except EOFError:
                    ended(slot)
                    continue
                if message[0] == "error":
                    raise WorkerError(f"environment process {slot}: {message[1]}", message[2])
                if message[0] == "result":
                    _, episode, result = message
                    pending[slot].remove(episode)
                    accept(episode, result)
            for slot, (process, _) in processes.items():
                silent = time.monotonic() - heard[slot]
                if silent > stall_s * (1 if slot in started else STARTS_PER_STALL) and slot not in stuck:
                    assert process.pid is not None  # start() started it
                    stuck[slot] = f"made no progress for {silent:.0f} s ({process_state(process.pid)}; killed)"
                    process.kill()  # its pipe's end is then the EOF that retries its episodes
    finally:
        for process, _ in processes.values():
            process.terminate()
        for process, _ in processes.values():
            process.join(timeout=10)
    return done
