"""A stalled or dead rank is found within `trainer.stall_timeout_s`, instead of when a collective times out.

Every rank runs a small thread that, every few seconds, writes its latest step and a beat counter to the job's
rendezvous store (the key-value store torchrun already runs) and reads every other rank's. A rank whose beat has
not changed for `stall_timeout_s` is stopped, dead, or on a frozen or unreachable node; every healthy rank then
names it and exits at once with EXIT_STALLED, saving nothing: its main thread is usually blocked inside a
collective that waits for that rank, so only a thread can act, and the last saved state is what resume continues.
A healthy rank on the stalled rank's node (same host, same torchrun agent) also SIGKILLs it after naming it: a
stopped process cannot act on torchrun's SIGTERM, which would otherwise hold the job for torchrun's 30 s grace.
A stalled rank alone on its node is ended by that node's launcher (scripts/train_8p.sh).

A rank whose torchrun agent died (its parent changed) is unsupervised: it asks itself to stop as on SIGTERM, so
the ranks save at the next step boundary and exit with EXIT_PREEMPTED instead of training on for the stall
timeout and losing that work.

Why the store and not the stop-vote's gloo group: a collective with a rank missing blocks and cannot tell who is
missing, while a stalled rank's store key simply stops changing. The main thread only assigns an int per step:
no device sync and no collective is added to the loop.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.training.rank_logging import RANK_SPECIFIC

if TYPE_CHECKING:  # torch only where a store is made: the launcher reads this module's limits without it
    import torch.distributed as dist

log = logging.getLogger(__name__)

# After 75 (preempted, sysexits EX_TEMPFAIL): retryable too, but a scheduler may want to tell the two apart.
EXIT_STALLED = 76
FINISHED = "finished"  # written by a rank that leaves the loop, so its silence afterwards is not a stall


class RankStalled(DiT4DiTError):
    """Another rank (or the store every rank reports to) has made no progress for longer than stall_timeout_s."""

    exit_code = EXIT_STALLED

    def __init__(self, message: str, sibling_pid: int | None = None):
        super().__init__(message)
        self.sibling_pid = sibling_pid  # the stalled rank's pid when it runs under this rank's torchrun agent


def stalled_rank_message(rank: int, host: str, seconds: float, step: int) -> str:
    return (f"rank {rank} on host {host} has made no progress for {seconds:.0f} s (last step {step}); stopping "
            "without saving. Restart the job with --trainer.is_resume true to continue from the last saved state")


def process_stat(pid: int | str) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process from /proc/PID/stat; None when it is gone (or there is no /proc)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def parent_of(pid: int) -> int | None:
    stat = process_stat(pid)
    return stat[0] if stat else None


def exit_now(error: RankStalled) -> None:
    """What a healthy rank does about a stall: say it, end the stalled sibling, and leave, even though the main
    thread is blocked."""
    log.error("%s: %s", type(error).__name__, error, extra=RANK_SPECIFIC)
    # Only a process of our own agent: a pid read from the store could have been reused by then.
    if error.sibling_pid is not None and parent_of(error.sibling_pid) == os.getppid():
        os.kill(error.sibling_pid, signal.SIGKILL)
        log.error("sent SIGKILL to the stalled rank's process %d (a stopped process cannot act on SIGTERM)",
                  error.sibling_pid, extra=RANK_SPECIFIC)
    record_exit_status(error.exit_code)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(error.exit_code)


STATUS_FILE_VARIABLE = "DIT4DIT_STATUS_FILE"  # set by the launcher (launch/run.py): its status when accelerate says 1


def record_exit_status(code: int) -> None:
    """`accelerate launch` exits 1 whatever its ranks' codes; the launcher reads this file to exit with ours."""
    path = os.environ.get(STATUS_FILE_VARIABLE)
    if path:
        try:
            with open(path, "a") as status:
                status.write(f"{code}\n")
        except OSError:  # the launcher's temporary file is gone: the exit code is still in the log
            pass


def stop_unsupervised() -> None:
    """The agent is gone: stop as SIGTERM would (preemption.StopSignal saves at the next step and exits 75)."""
    log.warning("the launching agent (torchrun) is gone: saving at the next step and stopping", extra=RANK_SPECIFIC)
    os.kill(os.getpid(), signal.SIGTERM)


def beat_interval(stall_timeout_s: float) -> float:
    """Several looks per timeout, so a stall is named within about 1.2 x the timeout; at most every 10 s, so a
    long timeout is named within 10 s of it and the job ends well within the timeout + 30 s."""
    return min(max(stall_timeout_s / 5, 0.05), 10.0)


def named_within(stall_timeout_s: float) -> float:
    """When, at the latest, the healthy ranks have named a rank that stalled (store latency aside)."""
    return stall_timeout_s + beat_interval(stall_timeout_s)


def beat_fields(value: str | None) -> list[str]:
    """beat, step, host, state, node, pid of a rank's store value (a missing rank: never beat, step 0)."""
    fields = value.split(" ") if value else []
    return fields[:6] + ["", "0", "unknown", "running", "", ""][len(fields):]


class Heartbeat:
    """Set `step` after each optimizer step; the thread does the rest. Inert with one rank or a timeout of 0."""

    def __init__(self, store: dist.Store | None, rank: int, world_size: int, stall_timeout_s: float,
                 on_stall: Callable[[RankStalled], None] = exit_now, prefix: str = "dit4dit/heartbeat",
                 node: str = "0", on_orphaned: Callable[[], None] = stop_unsupervised):
        self.step = 0
        self.store, self.rank, self.world_size, self.timeout = store, rank, world_size, stall_timeout_s
        self.on_stall, self.on_orphaned = on_stall, on_orphaned
        self.prefix = prefix
        self.host = socket.gethostname()
        self.node = node  # torchrun's GROUP_RANK: several nodes may share a host (and a test runs two on one)
        self.parent = os.getppid()  # the torchrun agent
        self.interval = beat_interval(stall_timeout_s)
        self._beats = 0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.store is not None and self.world_size > 1 and self.timeout > 0

    def key(self, rank: int) -> str:
        return f"{self.prefix}/{rank}"

    def start(self) -> Heartbeat:
        if self.active:
            self._write()
            self._thread = threading.Thread(target=self._watch, name="dit4dit-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Leaving the loop (done, preempted or failed): peers stop expecting beats from this rank."""
        if self._thread is None:
            return
        self._stopped.set()
        self._thread.join()
        self._thread = None
        try:
            self._write(FINISHED)
        except (RuntimeError, OSError):  # the store may be gone when the job is torn down; nothing to tell then
            pass

    def _active_store(self) -> dist.Store:
        assert self.store is not None  # only an active heartbeat (it has a store) writes and watches
        return self.store

    def _write(self, state: str = "running") -> None:
        self._beats += 1
        self._active_store().set(self.key(self.rank), f"{self._beats} {self.step} {self.host} {state} {self.node} {os.getpid()}")

    def _watch(self) -> None:
        started = time.monotonic()
        seen: dict[int, tuple[str, float]] = {}  # rank -> (its last beat, when that beat was first seen here)
        store_answered = started
        peers = [r for r in range(self.world_size) if r != self.rank]
        orphaned = False
        while not self._stopped.wait(self.interval):
            now = time.monotonic()
            if not orphaned and os.getppid() != self.parent:
                orphaned = True
                self.on_orphaned()
            try:
                self._write()
                store = self._active_store()
                values = {r: store.get(self.key(r)).decode() if store.check([self.key(r)]) else None for r in peers}
            except (RuntimeError, OSError) as error:  # DistStoreError is a RuntimeError
                if now - store_answered > self.timeout:
                    self.on_stall(RankStalled(f"the rendezvous store has not answered for {now - store_answered:.0f} s "
                                              f"({error}); stopping without saving. Restart the job with "
                                              "--trainer.is_resume true"))
                    return
                continue
            store_answered = now
            for rank, value in values.items():
                beat, step, host, state, node, pid = beat_fields(value)
                if state == FINISHED:
                    continue
                if rank not in seen or seen[rank][0] != beat:
                    seen[rank] = (beat, now if value else started)
                silent = now - seen[rank][1]
                if silent > self.timeout:
                    sibling = int(pid) if (host, node) == (self.host, self.node) and pid.isdigit() else None
                    self.on_stall(RankStalled(stalled_rank_message(rank, host, silent, int(step)), sibling))
                    return


# How long making the client may take: a store that does not answer its handshake by then is not one we can use.
CONNECT_TIMEOUT = timedelta(seconds=30)


def heartbeat_store(host: str, port: int, timeout: timedelta, prefix: str) -> dist.Store | None:
    """A client of our own on torchrun's store, or None (with a warning) where none can be made: under torch_npu_run
    or TORCH_NPU_USE_PARALLEL_TCPSTORE=True the port serves torch_npu's ParallelStore, whose protocol may differ."""
    import torch.distributed as dist

    try:
        store = dist.TCPStore(host, port, is_master=False, timeout=min(timeout, CONNECT_TIMEOUT))
        store.set_timeout(timeout)
        store.add(f"{prefix}/clients", 1)  # one round trip: connected is not yet understood
    except (RuntimeError, OSError, ValueError) as error:  # DistNetworkError / DistStoreError are RuntimeErrors
        reason = " ".join(str(error).split())[:200]
        parallel = os.environ.get("TORCH_NPU_USE_PARALLEL_TCPSTORE", "")
        log.warning("stall watch off: no store client on the rendezvous port %s:%s (%s)%s; a stalled rank now ends "
                    "the run when a collective times out (trainer.collective_timeout_s), without being named",
                    host, port, reason, f"; TORCH_NPU_USE_PARALLEL_TCPSTORE={parallel}" if parallel else "")
        return None
    return store


def start_heartbeat(stall_timeout_s: float, collective_timeout: timedelta) -> Heartbeat:
    """The heartbeat of this rank of a torchrun / accelerate launch job (inert in a single process, or where no
    store client can be made)."""
    import torch.distributed as dist

    world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if world_size == 1 or stall_timeout_s <= 0:
        return Heartbeat(None, 0, 1, 0)
    if stall_timeout_s >= collective_timeout.total_seconds():
        log.warning("trainer.stall_timeout_s (%s) is not below trainer.collective_timeout_s (%s): a stalled rank "
                    "makes the collectives fail first, without naming it", stall_timeout_s, collective_timeout.seconds)
    prefix = f"dit4dit/heartbeat/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    # Our own client, with our timeout, so a slow store never blocks the trainer's client.
    store = heartbeat_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                            min(collective_timeout, timedelta(seconds=stall_timeout_s)), prefix)
    return Heartbeat(store, dist.get_rank(), world_size, stall_timeout_s, prefix=prefix,
                     node=os.environ.get("GROUP_RANK", "0")).start()
