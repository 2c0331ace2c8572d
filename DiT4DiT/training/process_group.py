"""The end of a training process group, without torch 2.7's gloo teardown deadlock.

torch 2.7's ProcessGroupGloo destructor joins its worker threads with the GIL held. A gloo barrier keeps weak
references to the collectives still running or queued when it was issued, and whichever thread drops the barrier
last frees them, and with them tensors Python owns, which needs the GIL. When that is a worker thread while
destroy_process_group joins it, both wait forever (seen at the end of two-process CPU runs; pytorch/pytorch#154976
releases the GIL there, after 2.7). A collective freed by its worker right before the destructor starts is the
same hazard.
"""

from __future__ import annotations

import torch.distributed as dist


def destroy_process_group(everyone_here: bool) -> None:
    """dist.destroy_process_group() when one exists. `everyone_here`: every rank calls this now (the run ended
    well everywhere), so a last barrier can run first: its issuing waits out the workers' pending frees, and this
    thread holds it until the group is gone, so the workers have nothing left to free."""
    if not dist.is_initialized():
        return
    last = dist.barrier(async_op=True) if everyone_here else None
    if last is not None:
        last.wait()
    dist.destroy_process_group()
    del last  # what the barrier kept is freed here, by the thread that holds the GIL
