"""Loading a config: defaults, then a YAML file, then command-line overrides, checked against the schema.

The schema is the typed sections (DiT4DiT/config/sections.py): each key's default, one-line meaning, type,
choices and bounds, declared once as a dataclass field. Loading checks every key and every cross-key rule
(DiT4DiT/config/validate.py) before any process group, dataset or model exists, so the rest of the code reads
typed values and never re-checks them. A key that is not in the sections is an error naming the closest valid
key, except the keys the original's own YAMLs carry without reading them (accepted with one warning).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.keys import DECLARATION, Key, OpenNode, coerce, declared
from DiT4DiT.config.sections import MAX_SEQUENCE_LENGTH, MIN_LR_SCHEDULERS, ConfigSections
from DiT4DiT.config.typed import plain_values, section
from DiT4DiT.facts import is_under
from DiT4DiT.yaml_files import checked_yaml_text

# MAX_SEQUENCE_LENGTH and MIN_LR_SCHEDULERS are declared with the sections; serving and the optimizer read them here.
__all__ = ["ConfigError", "KNOWN_KEYS", "MAX_SEQUENCE_LENGTH", "MIN_LR_SCHEDULERS", "ConfigLike", "config_of", "default_config", "load_config",
           "normalize_cli_overrides"]


T = TypeVar("T")


class OriginalKeysWarning(UserWarning):
    """The config carries keys the original defines but never reads, or puts a key where the original ignores it."""


def _declarations(cls: type[Any] = ConfigSections, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(what, dotted path, value) of all the sections declare, depth first in declaration order: each key's Key,
    each open node's entry Key, the original's unread keys, and the keys only the original reads with their value."""
    for name in getattr(cls, "UNREAD_BY_THE_ORIGINAL", ()):
        yield "unread", prefix + name, None
    for name, value in getattr(cls, "READ_BY_THE_ORIGINAL_ONLY", {}).items():
        yield "recorded", prefix + name, value
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        path, hint, declaration = prefix + field.name, hints[field.name], field.metadata.get(DECLARATION)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            yield from _declarations(hint, path + ".")
        elif isinstance(declaration, OpenNode):
            entry_type = typing.get_args(hint)[1]
            yield "open", path, declared(path, entry_type, declaration.entry)
            for name, entry in declaration.present.items():
                yield "key", f"{path}.{name}", declared(path, entry_type, entry)
        else:
            assert isinstance(declaration, Key), path  # every field of a section is declared with key()
            yield "key", path, declared(path, hint, declaration)


_DECLARED = list(_declarations())
KNOWN_KEYS: dict[str, Key] = {path: key for what, path, key in _DECLARED if what == "key"}
# Nodes whose entries the user names (module paths for learning-rate groups), with the Key of each entry.
OPEN_NODES: dict[str, Key] = {path: key for what, path, key in _DECLARED if what == "open"}
# Keys the original's YAMLs define but its code never reads: accepted, listed in one warning, then dropped.
UNUSED_BY_THE_ORIGINAL = tuple(path for what, path, _ in _DECLARED if what == "unread")
# Keys the original's code reads and ours does not: accepted, dropped at load, and written into a run's config.yaml
# with the value in use here, so the original's from_pretrained and training find every key they ask for.
RECORDED_FOR_THE_ORIGINAL = {path: value for what, path, value in _DECLARED if what == "recorded"}
# The original's launch scripts pass framework keys under this prefix; the original then ignores them.
MISPLACED_PREFIX = "trainer."


def default_config() -> DictConfig:
    return OmegaConf.create(plain_values(ConfigSections()))


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf of a plain nested dict (an empty dict is a leaf); resume compares
    configs with it too."""
    for name, value in node.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            yield from leaves(value, path + ".")
        else:
            yield path, value


def _is_section(path: str) -> bool:
    return path in OPEN_NODES or any(is_under(k, (path,)) for k in KNOWN_KEYS)


def _closest(path: str) -> str:
    candidates = list(KNOWN_KEYS) + [p + ".<module name>" for p in OPEN_NODES]
    return difflib.get_close_matches(path, candidates, n=1, cutoff=0.0)[0]


def _drop(container: dict[str, Any], path: str) -> None:
    *parents, name = path.split(".")
    node = container
    for part in parents:
        node = node[part]
    del node[name]
    if parents and not node:
        _drop(container, ".".join(parents))


def accept_known_keys(cfg: DictConfig | dict[str, Any], source: str) -> dict[str, Any]:
    """`cfg` as a plain dict without the original's unread and misplaced keys (each warned about once);
    ConfigError for any other key the schema does not know."""
    container = plain_values(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    unused, misplaced = [], []
    for path, value in list(leaves(container)):
        if path in KNOWN_KEYS:
            if isinstance(value, dict) and value:
                raise ConfigError(f"{source}: '{path}' takes a single value, not a mapping")
        elif path not in OPEN_NODES and is_under(path, OPEN_NODES):  # a module's entry, not the node itself
            continue
        elif is_under(path, UNUSED_BY_THE_ORIGINAL):
            unused.append(path)
            _drop(container, path)
        elif path in RECORDED_FOR_THE_ORIGINAL:
            _drop(container, path)
        elif path.startswith(MISPLACED_PREFIX) and path[len(MISPLACED_PREFIX):] in KNOWN_KEYS:
            misplaced.append(path)
            _drop(container, path)
        elif is_under(path, KNOWN_KEYS):  # below a known leaf (the leaf itself was accepted above)
            raise ConfigError(f"{source}: '{path.rsplit('.', 1)[0]}' takes a single value, not a mapping")
        elif _is_section(path):
            raise ConfigError(f"{source}: '{path}' is a section; set its keys, e.g. '{path}.<key>'")
        else:
            raise ConfigError(f"{source}: unknown config key '{path}'. Did you mean '{_closest(path)}'? "
                              f"(valid keys are listed in DiT4DiT/config/sections.py)")
    if unused:
        warnings.warn(f"{source}: not used, as in the original: {', '.join(unused)}", OriginalKeysWarning, stacklevel=3)
    for path in misplaced:
        warnings.warn(f"{source}: '{path}' is not a key (the original ignores it, and so does this run); "
                      f"the key is '{path[len(MISPLACED_PREFIX):]}'", OriginalKeysWarning, stacklevel=3)
    return container


def normalize_cli_overrides(tokens: list[str]) -> list[str]:
    """`--a.b c`, `--a.b=c` and a bare `--flag` (= true) become OmegaConf dotlist items."""
    items: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise ConfigError(f"command line: unexpected argument '{token}'; overrides look like --a.b.c value")
        key = token.lstrip("-")
        if "=" in key:
            items.append(key)
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            items.append(f"{key}={tokens[i + 1]}")
            i += 2
        else:
            items.append(f"{key}=true")
            i += 1
    return items


def _typed(cfg: DictConfig) -> None:
    """Every value takes its key's type (or a ConfigError names the key); aliases are noted once each."""
    for path, key in KNOWN_KEYS.items():
        value = _resolved(cfg, path)
        typed, note = coerce(path, key, OmegaConf.to_object(value) if isinstance(value, ListConfig) else value)
        if note:
            warnings.warn(note, OriginalKeysWarning, stacklevel=3)
        OmegaConf.update(cfg, path, typed)
    for node, key in OPEN_NODES.items():
        for name, value in OmegaConf.select(cfg, node).items():
            OmegaConf.update(cfg, f"{node}.{name}", coerce(f"{node}.{name}", key, value)[0])


def _resolved(cfg: DictConfig, path: str) -> Any:
    """The value at `path` with its ${...} references resolved; a reference that does not resolve is a ConfigError."""
    try:
        return OmegaConf.select(cfg, path)
    except OmegaConfBaseException as error:
        reason = str(error).splitlines()[0]
        raise ConfigError(f"{path}: {reason}; a ${{...}} reference must name a config key that exists "
                          f"(e.g. ${{run_id}}) or be removed") from None


def _parsed(source: str, parse: Callable[[], T]) -> T:
    """YAML text parsed by `parse`; text YAML cannot read is a ConfigError naming where and what."""
    try:
        return parse()
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None and source != "command line" else ""
        reason = " ".join(str(getattr(error, "problem", None) or error).split())
        raise ConfigError(f"{source}{line}: not valid YAML ({reason}); fix the text there") from None


def read_config_file(path: str | Path) -> DictConfig:
    """A config YAML file as it stands (no defaults), read with bounds (size, text, expanded nodes)."""
    text = _parsed(str(path), lambda: checked_yaml_text(path, ConfigError, "config file", top=yaml.MappingNode))
    cfg = _parsed(str(path), lambda: OmegaConf.create(text))
    assert isinstance(cfg, DictConfig)  # checked_yaml_text refuses a top level that is not a mapping
    return cfg


def load_config(config_yaml: str | Path | None, overrides: list[str] | None = None) -> ConfigSections:
    """Defaults, then the YAML file, then CLI dotlist overrides, as the typed config; every key typed and every rule
    checked."""
    given: list[tuple[DictConfig | dict[str, Any], str]] = []
    if config_yaml is not None:
        path = Path(config_yaml)
        if not path.is_file():
            raise ConfigError(f"--config_yaml {path}: no such file; pass a YAML such as DiT4DiT/config/tiny/dit4dit_tiny.yaml")
        given.append((read_config_file(path), str(path)))
    if overrides:
        given.append((_parsed("command line", lambda: OmegaConf.from_dotlist(overrides)), "command line"))
    return _checked(given)


# What the original's code hands a model: our typed config, or its own OmegaConf tree or dict (config_of converts).
ConfigLike = ConfigSections | DictConfig | Mapping[str, Any]


def config_of(config: ConfigLike, source: str = "the model's config") -> ConfigSections:
    """The typed config of `config`: itself when typed, else the original's form (an OmegaConf tree or a dict, as its
    `DiT4DiT(config)` gets it) merged over the defaults and checked the way load_config checks a file."""
    if isinstance(config, ConfigSections):
        return config
    if isinstance(config, DictConfig):
        return _checked([(config, source)])
    return _checked([(copy.deepcopy({str(name): value for name, value in config.items()}), source)])


def _checked(given: list[tuple[DictConfig | dict[str, Any], str]]) -> ConfigSections:
    """The defaults with each (values, where they come from) merged over them in order, typed and checked."""
    from DiT4DiT.config.validate import check_rules, run_dir_of  # validate reads the key tree defined here

    cfg = default_config()
    for values, source in given:
        merged = OmegaConf.merge(cfg, accept_known_keys(values, source))
        assert isinstance(merged, DictConfig)  # a mapping merged over a mapping
        cfg = merged
    _typed(cfg)
    cfg.output_dir = str(run_dir_of(cfg.run_root_dir, cfg.run_id))
    typed = section(cfg, ConfigSections)
    check_rules(typed)
    return typed
