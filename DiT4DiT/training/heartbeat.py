"""A stalled or dead rank is found within `trainer.stall_timeout_s`, instead of when a collective times out.

Every rank runs a small thread that, every few seconds, writes its latest step and a beat counter to the job's
rendezvous store (the key-value store torchrun already runs) and reads every other rank's. A rank whose beat has
not changed for `stall_timeout_s` is stopped, dead, or on a frozen or unreachable node; every healthy rank then
names it and exits at once with EXIT_STALLED, saving nothing: its main thread is usually blocked inside a
collective that waits for that rank, so only a thread can act, and the last saved state is what resume continues.

Why the store and not the stop-vote's gloo group: a collective with a rank missing blocks and cannot tell who is
missing, while a stalled rank's store key simply stops changing. The main thread only assigns an int per step:
no device sync and no collective is added to the loop.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.training.rank_logging import RANK_SPECIFIC

log = logging.getLogger(__name__)

# After 75 (preempted, sysexits EX_TEMPFAIL): retryable too, but a scheduler may want to tell the two apart.
EXIT_STALLED = 76
FINISHED = "finished"  # written by a rank that leaves the loop, so its silence afterwards is not a stall


class RankStalled(DiT4DiTError):
    """Another rank (or the store every rank reports to) has made no progress for longer than stall_timeout_s."""

    exit_code = EXIT_STALLED


def stalled_rank_message(rank: int, host: str, seconds: float, step: int) -> str:
    return (f"rank {rank} on host {host} has made no progress for {seconds:.0f} s (last step {step}); stopping "
            "without saving. Restart the job with --trainer.is_resume true to continue from the last saved state")


def exit_now(error: RankStalled) -> None:
    """What a healthy rank does about a stall: say it and leave, even though the main thread is blocked."""
    log.error("%s: %s", type(error).__name__, error, extra=RANK_SPECIFIC)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(error.exit_code)


class Heartbeat:
    """Set `step` after each optimizer step; the thread does the rest. Inert with one rank or a timeout of 0."""

    def __init__(self, store: dist.Store | None, rank: int, world_size: int, stall_timeout_s: float,
                 on_stall: Callable[[RankStalled], None] = exit_now, prefix: str = "dit4dit/heartbeat"):
        self.step = 0
        self.store, self.rank, self.world_size, self.timeout = store, rank, world_size, stall_timeout_s
        self.on_stall = on_stall
        self.prefix = prefix
        self.host = socket.gethostname()
        # Several looks per timeout, so a stall is reported within about 1.2 x the timeout; at most every 30 s.
        self.interval = min(max(stall_timeout_s / 5, 0.05), 30.0)
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

    def _write(self, state: str = "running") -> None:
        self._beats += 1
        self.store.set(self.key(self.rank), f"{self._beats} {self.step} {self.host} {state}")

    def _watch(self) -> None:
        started = time.monotonic()
        seen: dict[int, tuple[str, float]] = {}  # rank -> (its last beat, when that beat was first seen here)
        store_answered = started
        peers = [r for r in range(self.world_size) if r != self.rank]
        while not self._stopped.wait(self.interval):
            now = time.monotonic()
            try:
                self._write()
                values = {r: self.store.get(self.key(r)).decode() if self.store.check([self.key(r)]) else None
                          for r in peers}
            except (RuntimeError, OSError) as error:  # DistStoreError is a RuntimeError
                if now - store_answered > self.timeout:
                    self.on_stall(RankStalled(f"the rendezvous store has not answered for {now - store_answered:.0f} s "
                                              f"({error}); stopping without saving. Restart the job with "
                                              "--trainer.is_resume true"))
                    return
                continue
            store_answered = now
            for rank, value in values.items():
                beat, step, host, state = value.split(" ") if value else ("", "0", "unknown", "running")
                if state == FINISHED:
                    continue
                if rank not in seen or seen[rank][0] != beat:
                    seen[rank] = (beat, now if value else started)
                silent = now - seen[rank][1]
                if silent > self.timeout:
                    self.on_stall(RankStalled(stalled_rank_message(rank, host, silent, int(step))))
                    return


def start_heartbeat(stall_timeout_s: float, collective_timeout: timedelta) -> Heartbeat:
    """The heartbeat of this rank of a torchrun / accelerate launch job (inert in a single process)."""
    world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if world_size == 1 or stall_timeout_s <= 0:
        return Heartbeat(None, 0, 1, 0)
    if stall_timeout_s >= collective_timeout.total_seconds():
        log.warning("trainer.stall_timeout_s (%s) is not below trainer.collective_timeout_s (%s): a stalled rank "
                    "makes the collectives fail first, without naming it", stall_timeout_s, collective_timeout.seconds)
    # A client of our own on torchrun's store, with our timeout, so a slow store never blocks the trainer's client.
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=min(collective_timeout, timedelta(seconds=stall_timeout_s)))
    prefix = f"dit4dit/heartbeat/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return Heartbeat(store, dist.get_rank(), world_size, stall_timeout_s, prefix=prefix).start()
