"""Activation checkpointing of transformer blocks (`trainer.enable_gradient_checkpointing`).

A checkpointed block keeps only its inputs for the backward pass and runs its forward again there, so a pass with
gradients keeps one block's activations at a time instead of every block's. Non-reentrant checkpointing: it
works with DeepSpeed ZeRO-2 and DDP, and replays the dropout masks (the RNG state is restored) and the autocast
state. The replay stops as soon as it has rebuilt what the backward needs, so forward pre-hooks run again but
forward hooks may not; the feature capture's hooks act only in the no-grad feature pass.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def checkpointed(block: torch.nn.Module, *args):
    """`block(*args)`, recomputed in the backward pass instead of keeping its activations."""
    return checkpoint(block, *args, use_reentrant=False)


def checkpoint_first(blocks, count: int):
    """A gradient_checkpointing_func for diffusers' enable_gradient_checkpointing (which hands it every block it
    runs with grad enabled) that recomputes the first `count` of `blocks` and runs the others as they are, keeping
    their activations (trainer.gradient_checkpointing_blocks: MindSpeed-MM's recompute of N of L layers)."""
    recomputed = {id(block) for block in list(blocks)[:count]}

    def run(block: torch.nn.Module, *args):
        return checkpointed(block, *args) if id(block) in recomputed else block(*args)

    return run


def run_block(block: torch.nn.Module, checkpointing: bool, *args):
    """`block(*args)`, checkpointed when `checkpointing` and a graph is being recorded (no_grad passes keep
    nothing to save)."""
    if checkpointing and torch.is_grad_enabled():
        return checkpointed(block, *args)
    return block(*args)


def checkpointed_modules(model: torch.nn.Module) -> list[str]:
    """'<module path> (N blocks)' for each module of `model` that recomputes its blocks in the backward pass (what
    is on, read from the model itself)."""
    return [f"{name} ({len(module.transformer_blocks)} blocks)" for name, module in model.named_modules()
            if getattr(module, "gradient_checkpointing", False) is True and hasattr(module, "transformer_blocks")]
