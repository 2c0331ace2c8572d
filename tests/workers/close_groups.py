"""Run under `accelerate launch`: CYCLES times a process group is made, gathered on, dropped and closed.

    close_groups.py CYCLES      -> prints "rank R closed CYCLES groups"

With a plain destroy_process_group, gloo's teardown deadlocks in some of these cycles (a rank that never
exits); the test's timeout turns that into a failure.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from accelerate import Accelerator

from DiT4DiT.training.process_group import close_process_group


def main() -> None:
    cycles = int(sys.argv[1])
    accelerator = Accelerator()
    for cycle in range(cycles):
        group = dist.new_group(backend="gloo")
        gathered = [torch.empty(3) for _ in range(accelerator.num_processes)]
        dist.all_gather(gathered, torch.full((3,), float(cycle)), group=group)
        del gathered  # the worker thread may now hold the last reference
        close_process_group(group)
    print(f"rank {accelerator.process_index} closed {cycles} groups", flush=True)
    close_process_group()


if __name__ == "__main__":
    main()
