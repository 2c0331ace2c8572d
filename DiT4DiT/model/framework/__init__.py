"""Framework registry: `build_framework(cfg)` builds the class registered under `cfg.framework.name`."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.config.sections import ConfigSections

FRAMEWORK_REGISTRY: dict[str, type] = {}


def register_framework(name: str) -> Callable[[type], type]:
    def register(cls: type) -> type:
        # The same class may register twice (a module run as __main__ and imported); another class may not.
        if name in FRAMEWORK_REGISTRY and FRAMEWORK_REGISTRY[name].__qualname__ != cls.__qualname__:
            existing = FRAMEWORK_REGISTRY[name].__qualname__
            raise ValueError(f"framework name {name!r} is already registered by {existing}")
        FRAMEWORK_REGISTRY[name] = cls
        return cls

    return register


def _import_frameworks() -> None:
    # Importing each module of this package runs its @register_framework decorators.
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def build_framework(cfg: ConfigSections) -> Any:
    _import_frameworks()
    name = cfg.framework.name
    if name not in FRAMEWORK_REGISTRY:
        raise ConfigError(
            f"framework.name={name!r} is not a registered framework; "
            f"registered: {', '.join(sorted(FRAMEWORK_REGISTRY))}"
        )
    return FRAMEWORK_REGISTRY[name](cfg)
