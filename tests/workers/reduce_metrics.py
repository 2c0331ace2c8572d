"""Run under `accelerate launch`: each rank feeds its own losses to the metrics window and the non-finite guard.

    reduce_metrics.py OUT_DIR      -> OUT_DIR/rank{r}.json with the reduced record and the guard's answers
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from DiT4DiT.training.metrics import DeviceWindow
from DiT4DiT.training.train import NonFiniteGuard


def rank_loss(rank: int, step: int) -> float:
    return 1.0 + rank + 0.5 * step


def main() -> None:
    out = Path(sys.argv[1])
    accelerator = Accelerator()
    rank, device = accelerator.process_index, accelerator.device
    window = DeviceWindow()
    for step in range(3):
        loss = torch.tensor(rank_loss(rank, step), device=device)
        window.add({"total_loss": loss, "grad_norm": torch.tensor(2.0 + step, device=device)})
    record = window.reduce(accelerator.gather)

    guard = NonFiniteGuard()
    for micro in range(3):
        bad = rank == 1 and micro == 1
        total = torch.tensor(float("nan") if bad else 1.0, device=device)
        guard.watch({"action_loss": total}, total)
    with_nan = guard.first_non_finite(accelerator.gather)
    guard.watch({"action_loss": torch.ones((), device=device)}, torch.ones((), device=device))
    all_finite = guard.first_non_finite(accelerator.gather)

    out.mkdir(parents=True, exist_ok=True)
    result = {"rank": rank, "record": record, "with_nan": with_nan, "all_finite": all_finite}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    # The results are written: leave without gloo's teardown. Right after a gather, destroy_process_group can
    # deadlock (torch 2.7.1: gloo's worker thread frees the gathered tensors, which needs the GIL that the
    # destructor holds while it joins that thread), and a process group left to interpreter exit can abort.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
