"""`baseframework` at the original's import path: what its deployment and evaluation code call.

`baseframework.from_pretrained(checkpoint)` builds the framework a run folder's config names and loads the
checkpoint into it: the original's checkpoints (every weight) as well as ours (frozen modules left out, reloaded
from `framework.cosmos25.base_model`). The model comes back on the CPU with `norm_stats` attached.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from DiT4DiT.config.schema import ConfigError, load_config
from DiT4DiT.model.framework import FRAMEWORK_REGISTRY, share_tools


class baseframework:  # noqa: N801 (the original's class name, imported by its clients)
    """Loading and action-statistics helpers shared by the frameworks."""

    @classmethod
    def from_pretrained(cls, pretrained_checkpoint: str | Path, **ignored_kwargs) -> nn.Module:
        """The model of `<run_dir>/config.yaml` with `pretrained_checkpoint` loaded (a .pt two levels below)."""
        share_tools.read_mode_config(pretrained_checkpoint)  # both run files present, or a clear error
        config = load_config(Path(pretrained_checkpoint).parents[1] / "config.yaml")
        return _framework_class(config.framework.name).from_pretrained(pretrained_checkpoint)

    @staticmethod
    def _check_unnorm_key(norm_stats: dict, unnorm_key: str | None) -> str:
        return share_tools.check_unnorm_key(norm_stats, unnorm_key)

    @classmethod
    def get_action_stats(cls, unnorm_key: str | None = None, norm_stats: dict | None = None) -> dict:
        """`norm_stats[tag]["action"]`; pass the model's `norm_stats` (the original reads a class attribute)."""
        return share_tools.get_action_stats(unnorm_key, norm_stats if norm_stats is not None else
                                            getattr(cls, "norm_stats", None))

    @staticmethod
    def unnormalize_actions(normalized_actions: np.ndarray, action_norm_stats: dict) -> np.ndarray:
        return share_tools.unnormalize_actions(normalized_actions, action_norm_stats)

    @staticmethod
    def trainable_module_keys(model: nn.Module, max_depth: int = 1) -> list[str]:
        """Names of the submodules (up to `max_depth` dots deep) that hold a trainable parameter."""
        return sorted({".".join(name.split(".")[:max_depth]) for name, parameter in model.named_parameters()
                       if parameter.requires_grad})


def _framework_class(name: str) -> type:
    import DiT4DiT.model.framework.DiT4DiT  # noqa: F401 (importing it registers the DiT4DiT framework)

    if name not in FRAMEWORK_REGISTRY:
        raise ConfigError(f"framework.name={name!r} is not a registered framework; registered: "
                          f"{', '.join(sorted(FRAMEWORK_REGISTRY))}")
    return FRAMEWORK_REGISTRY[name]
