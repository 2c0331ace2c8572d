"""Learning-rate groups and the learning-rate schedule (the optimizer itself is built in train.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import get_scheduler

from DiT4DiT.config.schema import MIN_LR_SCHEDULERS, ConfigError
from DiT4DiT.config.sections import TrainerSection


def build_param_groups(model: nn.Module, learning_rate: Mapping[str, float]) -> list[dict[str, Any]]:
    """One group per module path named in `trainer.learning_rate` (YAML order), the rest in group `base`.

    Frozen parameters are left out entirely, so the optimizer holds no state for them.
    """
    claimed: set[int] = set()
    groups = []
    for name, lr in learning_rate.items():
        if name == "base":
            continue
        if _absent_by_design(model, name):
            continue
        try:
            module = model.get_submodule(name)
        except AttributeError:
            raise ConfigError(
                f"trainer.learning_rate.{name}: the model has no module '{name}'; "
                f"top-level modules are {[n for n, _ in model.named_children()]}"
            ) from None
        params = [p for p in module.parameters() if p.requires_grad and id(p) not in claimed]
        claimed.update(id(p) for p in params)
        if params:
            groups.append({"params": params, "lr": float(lr), "name": name})
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in claimed]
    if rest:
        groups.append({"params": rest, "lr": float(learning_rate["base"]), "name": "base"})
    if not groups:
        raise ConfigError("trainer.freeze_modules froze every parameter: nothing is left to train")
    return groups


def _absent_by_design(model: nn.Module, path: str) -> bool:
    """A module slot the model leaves empty (e.g. `action_model` in video-only training)."""
    node = model
    for part in path.split("."):
        if not hasattr(node, part):
            return False
        node = getattr(node, part)
        if node is None:
            return True
    return False


def build_lr_scheduler(optimizer: Optimizer, trainer_cfg: TrainerSection) -> LambdaLR:
    """transformers' named schedule with warm-up, stepped once per optimizer step."""
    min_lr = {"min_lr": trainer_cfg.scheduler_specific_kwargs.min_lr}
    kwargs = min_lr if trainer_cfg.lr_scheduler_type in MIN_LR_SCHEDULERS else {}
    return get_scheduler(
        trainer_cfg.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=trainer_cfg.num_warmup_steps,
        num_training_steps=trainer_cfg.max_train_steps,
        scheduler_specific_kwargs=kwargs,
    )
