"""A loaded config node as its typed, frozen section (the dataclasses of DiT4DiT/config/sections.py).

`section(cfg.trainer, TrainerSection)` gives every key of the node as a typed attribute an editor completes.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf

T = typing.TypeVar("T")


def section(node: DictConfig, cls: type[T]) -> T:
    """The frozen dataclass `cls` filled from a loaded config node (values are already typed and checked)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        value, hint = node[field.name], hints[field.name]
        if dataclasses.is_dataclass(hint):
            values[field.name] = section(value, hint)
        else:
            values[field.name] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return cls(**values)
