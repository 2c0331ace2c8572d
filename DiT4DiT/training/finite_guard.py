"""The non-finite-loss guard: a bad micro-batch never reaches the weights, at one host wait per optimizer step.

Each micro-batch's finite flag stays on the device; before the backward of the step's last micro-batch (the one
that updates the weights: DeepSpeed steps inside that backward) all ranks' flags are gathered and read once.
"""

from __future__ import annotations

from typing import Callable

import torch


class NonFiniteGuard:
    def __init__(self):
        self.flags: list[torch.Tensor] = []
        self.losses: list[dict[str, torch.Tensor]] = []

    def watch(self, losses: dict[str, torch.Tensor], total: torch.Tensor) -> None:
        """Record one micro-batch (no host read)."""
        self.flags.append(torch.isfinite(total.detach()).reshape(()))
        self.losses.append({name: value.detach() for name, value in losses.items()})

    def first_non_finite(self, gather: Callable[[torch.Tensor], torch.Tensor]) -> tuple[int, dict[str, float]] | None:
        """Collective over ranks: None when every micro-batch so far was finite on every rank, else the first bad
        micro-batch's index and this rank's loss values for it. Clears the recorded micro-batches."""
        flags = gather(torch.stack(self.flags).reshape(1, -1)).reshape(-1, len(self.flags)).all(dim=0).cpu()
        losses, self.flags, self.losses = self.losses, [], []
        if bool(flags.all()):
            return None
        micro = int((~flags).nonzero()[0])
        return micro, {name: float(value) for name, value in losses[micro].items()}
