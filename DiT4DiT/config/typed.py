"""The typed config and the forms it is read from: a loaded OmegaConf node or a plain mapping becomes its frozen
section (the dataclasses of DiT4DiT/config/sections.py), and a dotted key is read from any of them.

`load_config` already returns the typed tree; `section(node, TrainerSection)` is for the original's configs
(OmegaConf trees or dicts, e.g. `DiT4DiT(config)`), and gives an already-typed section back as it is.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from DiT4DiT.config.keys import Entries

T = typing.TypeVar("T")
_MISSING = object()


def section(node: Any, cls: type[T]) -> T:
    """The frozen dataclass `cls` filled from a loaded config node or a mapping (values are already typed and
    checked); an instance of `cls` is returned unchanged."""
    if isinstance(node, cls):
        return node
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]  # cls is one of the section dataclasses
        value, hint = node[field.name], hints[field.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[field.name] = section(value, hint)
        elif typing.get_origin(hint) is dict:  # an open node (keys.open_node)
            values[field.name] = Entries(plain_values(value))
        else:
            values[field.name] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return cls(**values)


def plain_values(config: Any, resolve: bool = True) -> dict[str, Any]:
    """A config (typed, an OmegaConf tree or a mapping) as a plain nested dict, ${...} references resolved (or
    kept as text: `resolve=False`)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        values: dict[str, Any] = _plain(config)
        return values
    if OmegaConf.is_config(config):
        container = OmegaConf.to_container(config, resolve=resolve)
        assert isinstance(container, dict)  # a config's root is a mapping (read_config_file checks it)
        return {str(k): v for k, v in container.items()}
    return dict(config)


def _plain(value: Any) -> Any:
    """Sections as dicts, open nodes as plain dicts (OmegaConf, YAML and JSON take only those), lists as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {name: _plain(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def value_at(config: Any, path: str, default: Any = _MISSING) -> Any:
    """The value of dotted key `path` in a typed config, an OmegaConf tree or a nested mapping; `default` (or a
    KeyError naming the key) where a part of the path is absent."""
    node = config
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif dataclasses.is_dataclass(node) and part in {f.name for f in dataclasses.fields(node)}:
            node = getattr(node, part)
        elif default is _MISSING:
            raise KeyError(path)
        else:
            return default
    return node


def replaced(config: T, path: str, value: Any) -> T:
    """A typed config with dotted key `path` set to `value` (the sections are frozen: each level is rebuilt)."""
    name, _, rest = path.partition(".")
    inner = value if not rest else replaced(getattr(config, name), rest, value)
    return dataclasses.replace(config, **{name: inner})  # type: ignore[type-var]  # config is a section dataclass
