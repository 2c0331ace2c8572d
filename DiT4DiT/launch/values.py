"""The config values the launcher needs, resolved as the trainer will resolve them, each with its source.

The launcher forwards only what the user typed; every other value comes from the YAML chosen for the host
(or the schema's default). It still needs a few of them before starting (where the run dir and log go, which
model and data folders to check, the collective timeout), and the dry run shows them. The config is loaded
exactly as the trainer loads it, so a bad key or value is reported here, before any process starts.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Any

from DiT4DiT.config.recorded import read_config_values
from DiT4DiT.config.schema import ConfigError, load_config, normalize_cli_overrides
from DiT4DiT.config.typed import value_at
from DiT4DiT.config.validate import action_chunk
from DiT4DiT.dataloader.config_checks import check_data_configs

DETERMINISTIC_KEY = "trainer.deterministic"  # the launcher exports the collectives' deterministic variables
SHOWN = ("run_root_dir", "run_id", "framework.cosmos25.base_model", "datasets.vla_data.data_root_dir",
         "datasets.vla_data.data_mix", DETERMINISTIC_KEY)
COLLECTIVE_TIMEOUT_KEY = "trainer.collective_timeout_s"
STALL_TIMEOUT_KEY = "trainer.stall_timeout_s"  # the launcher ends a rank stopped for longer (scripts/train_8p.sh)


@dataclass(frozen=True)
class Value:
    key: str
    value: str  # "" when unset
    source: str  # "option", "yaml" or "default"


def source_of(key: str, overridden: set[str], yaml_values: dict[str, Any]) -> str:
    if key in overridden:
        return "option"
    parent, _, leaf = key.rpartition(".")
    node = value_at(yaml_values, parent, None) if parent else yaml_values
    return "yaml" if isinstance(node, dict) and leaf in node else "default"


def unknown_option(items: list[str], top_level: set[str], options: list[str]) -> str:
    """The launcher's error for an undotted name that is neither one of its options nor a top-level key."""
    for item in items:
        key = item.split("=", 1)[0]
        if "." not in key and key not in top_level:
            close = difflib.get_close_matches(key, [*options, *top_level], n=1)
            hint = f"; did you mean --{close[0]}?" if close else ""
            return (f"unknown option --{key}{hint} (see --help); trainer config keys are dotted, "
                    "e.g. --trainer.save_interval=1000")
    return ""


def resolve(config_yaml: str, forwarded: list[str], options: list[str]) -> dict[str, Value]:
    """SHOWN keys, every overridden key and the collective and stall timeouts, in that order; ConfigError when
    the config does not load with these overrides."""
    items = normalize_cli_overrides(forwarded)
    top_level = {f.name for f in fields(load_config(config_yaml, []))}  # also says clearly when the YAML is missing or wrong
    problem = unknown_option(items, top_level, options)
    if problem:
        raise ConfigError(problem)
    cfg = load_config(config_yaml, items)
    check_data_configs(cfg.datasets.vla_data, action_chunk(cfg))
    yaml_values = read_config_values(config_yaml, resolve=False)  # which keys it sets, not their values
    overridden = {item.split("=", 1)[0] for item in items}
    values = {}
    for key in [*SHOWN, *(k for k in sorted(overridden) if k not in SHOWN)]:
        value = value_at(cfg, key, None)
        values[key] = Value(key, "" if value is None else str(value), source_of(key, overridden, yaml_values))
    for key in (COLLECTIVE_TIMEOUT_KEY, STALL_TIMEOUT_KEY):  # load_config filled the schema's defaults
        values[key] = Value(key, str(value_at(cfg, key)), source_of(key, overridden, yaml_values))
    return values
