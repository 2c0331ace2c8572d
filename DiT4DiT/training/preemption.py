"""SIGTERM / SIGINT: finish the current step, save a training state, exit with EXIT_PREEMPTED.

A signal may reach some ranks and not others, or at different steps. Every rank contributes its flag to a
max all-reduce on a CPU (gloo) group at each step boundary, so all ranks stop after the same step without
ever waiting for the device. The reduce is started at one boundary and read at the next, so its latency
overlaps a training step; the stop comes one step after the signal.
"""

from __future__ import annotations

import logging
import signal
from datetime import timedelta

import torch
import torch.distributed as dist

from DiT4DiT.errors import DiT4DiTError

log = logging.getLogger(__name__)

# sysexits.h EX_TEMPFAIL: "temporary failure, the user is invited to retry" (continue with --trainer.is_resume true).
EXIT_PREEMPTED = 75
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def ignore_stop_signals(worker_id: int) -> None:
    """DataLoader worker_init_fn: torchrun signals the trainer's whole process group, workers included; they
    must live on until the trainer has saved (it ends them itself)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class Preempted(DiT4DiTError):
    """Training stopped on a signal after saving a training state."""

    exit_code = EXIT_PREEMPTED

    def __init__(self, signal_name: str, step: int, state):
        super().__init__(
            f"stopped by {signal_name} after step {step}; training state saved in {state}. Continue with the same "
            "command plus --trainer.is_resume true"
        )


class StopSignal:
    """Catches SIGTERM/SIGINT (a second one stops at once, the default action) and agrees on when to stop."""

    def __init__(self):
        self.received: str | None = None
        self._group = None
        self._pending: tuple[dist.Work, torch.Tensor] | None = None
        self._previous = {}
        self._distributed = False

    def install(self, timeout: timedelta | None = None) -> StopSignal:
        """`timeout`: how long a vote may wait for the other ranks (torch's default for a new gloo group is 30 min)."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # Its own gloo group keeps the vote on the host whatever backend the default group uses (HCCL, NCCL).
            self._group = dist.new_group(backend="gloo", timeout=timeout)
            self._distributed = True
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        self.received = name
        log.warning("%s received: finishing this step, saving a training state, then stopping (send it again to "
                    "stop at once without saving)", name)
        for sig in SIGNALS:
            signal.signal(sig, self._previous[sig])

    def uninstall(self) -> None:
        """Restore the handlers; a vote still in flight is completed (every rank has one, so none waits alone)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None
        for sig, handler in self._previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, handler)

    def agreed(self) -> bool:
        """At a step boundary, on every rank: True when some rank had received a signal one boundary earlier."""
        if not self._distributed:
            return self.received is not None
        stop = False
        if self._pending is not None:
            work, flag = self._pending
            work.wait()
            stop = bool(flag.item())
        flag = torch.tensor([1 if self.received else 0], dtype=torch.int32)
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True), flag)
        return stop

    @property
    def signal_name(self) -> str:
        return self.received or "a signal on another rank"
