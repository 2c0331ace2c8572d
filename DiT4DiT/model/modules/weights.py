"""Load a DiT4DiT weights file (a flat {name: tensor} dict) into a built model.

Checkpoints hold the trainable parameters; the run's frozen modules are left out because they reload from the
base Cosmos snapshot. So: every key in the file must exist in the model with the same shape, and only keys
under the modules the caller names (what the run's config says it left out) may be missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.facts import is_under


class CheckpointMismatchError(DiT4DiTError, ValueError):
    """A weights file that does not fit the model built from its config."""

    exit_code = 2


def load_trained_weights(
    model: nn.Module,
    state_dict: dict[str, torch.Tensor],
    source: str | Path,
    may_be_missing: Sequence[str],
) -> None:
    """Strict about what the file holds; keys under the `may_be_missing` module paths (facts.is_under) keep the
    model's values."""
    expected = model.state_dict()
    unexpected = [k for k in state_dict if k not in expected]
    if unexpected:
        raise CheckpointMismatchError(
            f"{source}: {len(unexpected)} keys are not in the model, e.g. {unexpected[:3]}; "
            "was it saved by a model with a different framework.action_model / cosmos25 config?"
        )
    wrong_shape = [
        f"{k} {tuple(v.shape)} vs model {tuple(expected[k].shape)}"
        for k, v in state_dict.items()
        if tuple(v.shape) != tuple(expected[k].shape)
    ]
    if wrong_shape:
        raise CheckpointMismatchError(f"{source}: shapes differ from the model's: {wrong_shape[:3]}")
    missing = [k for k in expected if k not in state_dict and not is_under(k, may_be_missing)]
    if missing:
        raise CheckpointMismatchError(
            f"{source}: {len(missing)} trained weights are missing, e.g. {missing[:3]}; only frozen modules "
            f"may be left out (they reload from framework.cosmos25.base_model): {list(may_be_missing)}"
        )
    model.load_state_dict(state_dict, strict=False)
