"""The config values the launcher needs, resolved as the trainer will resolve them, each with its source.

The launcher forwards only what the user typed; every other value comes from the YAML chosen for the host
(or the schema's default). It still needs a few of them before starting (where the run dir and log go, which
model and data folders to check), and `--dry-run` shows them. This loads the config exactly as the trainer
does, so a bad key or value is reported here, before any process starts.

    python -m DiT4DiT.tools.launch_plan --config_yaml FILE [--options a,b] [--show KEY ...] -- --a.b=c ...
    -> one line per shown key and per override: KEY <tab> SOURCE (option / yaml / default) <tab> VALUE
    exit 2 with the reason when the config does not load; an unknown undotted name is reported as an
    unknown launcher option with the closest launcher option or top-level key.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from omegaconf import OmegaConf

from DiT4DiT.config.schema import ConfigError, load_config, normalize_cli_overrides


def source_of(key: str, overridden: set[str], yaml_cfg) -> str:
    if key in overridden:
        return "option"
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(yaml_cfg, parent) if parent else yaml_cfg
    return "yaml" if OmegaConf.is_dict(node) and leaf in node else "default"


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


def plan(config_yaml: str, tokens: list[str], show: list[str], options: list[str]) -> list[tuple[str, str, str]]:
    items = normalize_cli_overrides(tokens)
    top_level = set(load_config(config_yaml, []))  # also says clearly when the YAML is missing or wrong
    yaml_cfg = OmegaConf.load(config_yaml)
    problem = unknown_option(items, top_level, options)
    if problem:
        raise ConfigError(problem)
    cfg = load_config(config_yaml, items)
    overridden = {item.split("=", 1)[0] for item in items}
    rows = []
    for key in [*show, *(k for k in sorted(overridden) if k not in show)]:
        value = OmegaConf.select(cfg, key)
        text = "" if value is None else str(value)
        rows.append((key, source_of(key, overridden, yaml_cfg), text))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config_yaml", required=True)
    parser.add_argument("--options", default="", help="the launcher's own option names, comma-separated")
    parser.add_argument("--show", nargs="*", default=[], help="keys to print besides the overridden ones")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="-- then the trainer overrides")
    args = parser.parse_args(argv)
    tokens = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    try:
        rows = plan(args.config_yaml, tokens, args.show, [o for o in args.options.split(",") if o])
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    for row in rows:
        if any("\t" in part or "\n" in part for part in row):
            print(f"{row[0]}: tabs and newlines are not allowed in launcher values", file=sys.stderr)
            return 2
        print("\t".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
