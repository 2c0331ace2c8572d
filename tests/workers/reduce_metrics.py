"""Run under `accelerate launch`: each rank feeds its own losses to the metrics window and the non-finite guard.

    reduce_metrics.py OUT_DIR      -> OUT_DIR/rank{r}.json with the reduced record and the guard's answers
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from DiT4DiT.training.metrics import DeviceWindow
from DiT4DiT.training.process_group import destroy_process_group
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
    destroy_process_group(everyone_here=True)  # right after a gather, as the trainer's end


if __name__ == "__main__":
    main()
