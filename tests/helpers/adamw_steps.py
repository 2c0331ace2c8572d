"""A few AdamW steps on one batch, for tests that compare two ways of computing the same step."""

from __future__ import annotations

import torch


def step_losses(model, examples, steps: int = 3) -> list[float]:
    """action and future-video loss of each of `steps` AdamW steps (lr 1e-3) on `examples`, from torch seed 1."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    torch.manual_seed(1)
    values = []
    for _ in range(steps):
        losses = model(examples)
        total = losses["action_loss"] + losses["future_video_loss"]
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        values += [losses["action_loss"].item(), losses["future_video_loss"].item()]
    return values
