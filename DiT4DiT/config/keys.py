"""A config key's declaration (default, meaning, type, choices, bounds) and how a raw YAML/CLI value becomes typed.

`Key(default, help)` alone is a complete declaration: the type follows from the default. Everything else is
optional and says what the loader must enforce, so no other module re-parses or re-casts a value. In the schema
(DiT4DiT/config/sections.py) a key is a dataclass field, `name: type = key(default, help, ...)`, whose annotation
gives its type, choices and whether null is allowed (`declared`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from DiT4DiT.config.errors import ConfigError

KINDS = ("bool", "int", "float", "str", "int_list", "float_list", "str_list", "size", "any")


@dataclass(frozen=True)
class Key:
    default: Any
    help: str
    kind: str | None = None  # one of KINDS; None: the default's type ("any": taken as given, for a null default)
    choices: tuple[Any, ...] = ()  # allowed values (for a *_list: allowed items)
    min: float | None = None  # inclusive bounds (NaN is outside any bound)
    max: float | None = None
    nullable: bool | None = None  # None: null is allowed when the default is null
    aliases: dict[Any, Any] = field(default_factory=dict)  # other spellings -> the value used (e.g. YAML's `no` is False)
    alias_note: str = ""  # when set, applying an alias prints this one-line note (e.g. for the original's names)
    length: int | None = None  # exact length of a list
    why: str = ""  # the reason for the bounds, said with a value outside them

    @property
    def type(self) -> str:
        if self.kind is not None:
            return self.kind
        return kind_of(self.default)

    @property
    def allows_null(self) -> bool:
        return self.default is None if self.nullable is None else self.nullable


@dataclass(frozen=True)
class OpenNode:
    """A node whose entries the user names (a learning rate per module path): each is checked as `entry`; the
    entries present by default are keys of their own."""

    entry: Key
    present: dict[str, Key]


DECLARATION = "dit4dit_key"  # where a field's metadata holds its Key or OpenNode


def key(default: Any, help: str, *, kind: str | None = None, min: float | None = None, max: float | None = None,
        aliases: dict[Any, Any] | None = None, alias_note: str = "", length: int | None = None, why: str = "") -> Any:
    """A config key as a dataclass field: its default, and its declaration as metadata (type, choices and null
    come from the field's annotation; `kind` only where the annotation cannot say it, e.g. "size")."""
    declaration = Key(default, help, kind=kind, min=min, max=max, aliases=aliases or {}, alias_note=alias_note,
                      length=length, why=why)
    if isinstance(default, list):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={DECLARATION: declaration})
    return field(default=default, metadata={DECLARATION: declaration})


class Entries(dict[str, Any]):
    """An open node's entries (e.g. trainer.learning_rate: a rate per module path), read as `node["name"]` or, as
    the loaded tree allowed, `node.name`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def open_node(entry: Key, **present: Key) -> Any:
    """A field whose entries the user names, each checked as `entry`; `present` are there by default."""
    return field(default_factory=lambda: Entries({name: k.default for name, k in present.items()}),
                 metadata={DECLARATION: OpenNode(entry, present)})


_SCALAR_KINDS = {bool: "bool", int: "int", float: "float", str: "str"}


def declared(path: str, annotation: Any, declaration: Key) -> Key:
    """`declaration` with the kind, choices and nullability its field's annotation gives (X | None allows null,
    Literal[...] lists the choices, list[X] is a list of X)."""
    args = typing.get_args(annotation)
    nullable = typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
    if nullable:
        (annotation,) = (arg for arg in args if arg is not type(None))
    suffix = ""
    if typing.get_origin(annotation) is list:
        (annotation,), suffix = typing.get_args(annotation), "_list"
    choices: tuple[Any, ...] = ()
    if typing.get_origin(annotation) is Literal:
        choices = typing.get_args(annotation)
        annotation = type(choices[0])
    if annotation not in _SCALAR_KINDS:
        raise TypeError(f"{path}: a config key is bool, int, float, str, a Literal or a list of them, "
                        f"not {annotation!r}")
    kind = declaration.kind or _SCALAR_KINDS[annotation] + suffix
    return dataclasses.replace(declaration, kind=kind, choices=choices, nullable=nullable)


def kind_of(value: Any) -> str:
    if value is None:
        return "any"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (list, tuple)):
        return f"{kind_of(value[0]) if value else 'str'}_list"
    return "str"


def _scalar(path: str, kind: str, value: Any) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if kind == "str":
        if isinstance(value, bool):  # a valueless --key on the command line reads as true
            raise ConfigError(f"{path}: expected text, got {str(value).lower()}; give it a value, e.g. --{path}=NAME")
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{path}: expected text, got {value!r}")
        return str(value)
    if isinstance(value, bool):
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    try:
        number = float(value)  # YAML and the command line give '1e-4' or 'inf' as text
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: expected a number, got {value!r}") from None
    if kind == "int":
        if not number.is_integer():
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return int(number)
    return number


def _size(path: str, value: Any) -> int:
    """An image side: an int, or the original's [h, w] with h == w (views are resized to squares)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ConfigError(f"{path}: expected an integer or [height, width], got {list(value)!r}")
        height, width = (_scalar(path, "int", v) for v in value)
        if height != width:
            raise ConfigError(f"{path}: [{height}, {width}] is not square; each camera view is resized to a square, "
                              f"so give one size (e.g. {path.rsplit('.', 1)[-1]}: {height})")
        return int(height)
    return int(_scalar(path, "int", value))


def _check_value(path: str, key: Key, value: Any) -> None:
    if key.choices and value not in key.choices:
        choices = ", ".join(map(str, key.choices))
        close = difflib.get_close_matches(str(value), [str(c) for c in key.choices], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{path}: {value!r} is not one of {choices}{hint}")
    why = f" ({key.why})" if key.why else ""
    shown = f"{value:g}" if isinstance(value, (int, float)) and abs(value) >= 1e15 else repr(value)
    if key.min is not None and not value >= key.min:
        raise ConfigError(f"{path}: must be at least {key.min}, got {shown}{why}")
    if key.max is not None and not value <= key.max:
        raise ConfigError(f"{path}: must be at most {key.max}, got {shown}{why}")
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"{path}: NaN is not a value; set a number")


def coerce(path: str, key: Key, value: Any) -> tuple[Any, str | None]:
    """(typed value, a note when an alias was applied) or a ConfigError naming the key."""
    if value is None:
        if key.allows_null:
            return None, None
        raise ConfigError(f"{path}: cannot be null; set a value (the default is {key.default!r})")
    note = None
    lookup = str(value).lower() if isinstance(value, (bool, str)) else value
    if not isinstance(value, (list, tuple)) and lookup in key.aliases:
        value = key.aliases[lookup]
        note = f"{path}={lookup}: {key.alias_note} {value}" if key.alias_note else None
    kind = key.type
    if kind == "any":
        return value, note
    if kind == "size":
        typed = _size(path, value)
        _check_value(path, key, typed)
        return typed, note
    if kind.endswith("_list"):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, e.g. [{key.default[0] if key.default else 'a'}, ...], got {value!r}")
        if key.length is not None and len(value) != key.length:
            raise ConfigError(f"{path}: expected {key.length} values, got {len(value)}")
        item_kind = kind[: -len("_list")]
        items = [_scalar(path, item_kind, item) for item in value]
        for item in items:
            _check_value(path, key, item)
        return items, note
    typed = _scalar(path, kind, value)
    if kind == "str" and key.choices and typed not in key.choices and typed.lower() in key.choices:
        typed = typed.lower()  # JOINT, Joint and joint name the same mode
    _check_value(path, key, typed)
    return typed, note
