"""Freeze the modules named by `trainer.freeze_modules` (comma-separated dotted paths)."""

from __future__ import annotations

from torch import nn

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import TrainerSection
from DiT4DiT.facts import module_paths


def left_out_of_checkpoints(trainer: TrainerSection) -> list[str]:
    """Module paths a run's checkpoints leave out: its frozen modules, unless it saves full state dicts."""
    return [] if trainer.save_full_state_dict else module_paths(trainer.freeze_modules)


def freeze_modules(model: nn.Module, paths: str | None) -> list[str]:
    """Set requires_grad=False on every parameter under each path; return the paths frozen.

    An unknown path is an error (the original only warned, and a typo then trained a module meant to be frozen).
    """
    names = module_paths(paths)
    for name in names:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            top = ", ".join(n for n, _ in model.named_children())
            raise ConfigError(
                f"trainer.freeze_modules: no module '{name}' in the model; paths are dotted module names "
                f"under one of: {top} (e.g. backbone_interface.extractor.text_encoder)"
            ) from None
        module.requires_grad_(False)
    return names
