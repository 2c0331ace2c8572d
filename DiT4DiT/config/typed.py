"""Typed, frozen views of the config's sections, for editors and type checkers (generated from the schema).

`DiT4DiT/config/sections.py` is generated from SCHEMA by this module and checked in, so every key is a typed
attribute an editor completes; `tests/test_config_sections.py` fails when it is stale. Regenerate with
    python -m DiT4DiT.config.typed > DiT4DiT/config/sections.py
`section(cfg.trainer, TrainerSection)` turns a loaded (already checked) config node into its dataclass.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf

from DiT4DiT.config.keys import Key
from DiT4DiT.config.schema import OPEN_NODES, SCHEMA

_SCALARS = {"bool": "bool", "int": "int", "float": "float", "str": "str", "size": "int", "any": "object",
            "int_list": "list[int]", "float_list": "list[float]", "str_list": "list[str]"}


def class_name(path: str) -> str:
    """'trainer.loss_scale' -> 'TrainerLossScaleSection'; the root is 'ConfigSections'."""
    if not path:
        return "ConfigSections"
    return "".join(part[:1].upper() + part[1:] for chunk in path.split(".") for part in chunk.split("_")) + "Section"


def _annotation(key: Key) -> str:
    base = _SCALARS[key.type]
    if key.type == "str" and key.choices:
        base = f"Literal[{', '.join(repr(choice) for choice in key.choices)}]"
    return f"{base} | None" if key.allows_null and base != "object" else base


def _classes(node: dict, path: str) -> list[str]:
    """Source of the dataclasses for `node` and below, children first (so every name is defined before use)."""
    blocks, fields = [], []
    for name, value in node.items():
        dotted = f"{path}.{name}" if path else name
        if dotted in OPEN_NODES:
            fields.append(f"    {name}: dict[str, float]  # 'base' and one rate per named module")
        elif isinstance(value, Key):
            fields.append(f"    {name}: {_annotation(value)}  # {value.help}")
        else:
            blocks += _classes(value, dotted)
            fields.append(f"    {name}: {class_name(dotted)}")
    title = path or "the whole config"
    blocks.append(f"@dataclass(frozen=True)\nclass {class_name(path)}:\n    \"\"\"{title}\"\"\"\n\n" + "\n".join(fields) + "\n")
    return blocks


def render() -> str:
    header = ('"""Typed sections of the config, generated from DiT4DiT/config/schema.py by DiT4DiT/config/typed.py:\n'
              'do not edit; regenerate with  python -m DiT4DiT.config.typed > DiT4DiT/config/sections.py\n"""\n\n'
              "# ruff: noqa: E501\nfrom __future__ import annotations\n\nfrom dataclasses import dataclass\nfrom typing import Literal\n")
    return header + "".join(f"\n\n{block}" for block in _classes(SCHEMA, ""))


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


if __name__ == "__main__":
    print(render(), end="")
