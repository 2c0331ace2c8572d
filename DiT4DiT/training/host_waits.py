"""Waits around work that one rank (or one per node) does while the others wait: the dataset index, the prompt
store's share, a checkpoint's write. They wait on a CPU (gloo) group with a timeout sized for that work
(trainer.one_rank_timeout_s), never on a device collective: torch_npu's barrier is an HCCL all-reduce that fails
after HCCL_EXEC_TIMEOUT (the launcher sets it to 90% of trainer.collective_timeout_s), NCCL's after the process
group's timeout, and on slow shared storage writing a 2B model's state or an index of many datasets takes longer.

The group is made by every rank at the same point (Trainer's start); each wait is synchronous, so no collective of
it is still in flight when the process group ends (training/process_group.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist


class HostWaits:
    """Barrier, local-main-first and a sum over all ranks, on a gloo group of its own; nothing to wait for in a
    single process."""

    def __init__(self, timeout: timedelta):
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self.group = dist.new_group(backend="gloo", timeout=timeout) if distributed else None

    def barrier(self) -> None:
        if self.group is not None:
            dist.barrier(group=self.group)

    def all_sum(self, value: int) -> int:
        """The sum of `value` over all ranks (every rank calls it at the same point, so it is a barrier too)."""
        if self.group is None:
            return value
        total = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(total, group=self.group)
        return int(total.item())

    @contextlib.contextmanager
    def first(self, leader: bool) -> Iterator[None]:
        """The body runs on the leader (e.g. each node's local main process) before the others start it."""
        if not leader:
            self.barrier()
        yield
        if leader:
            self.barrier()
