"""A served run folder's config.yaml checked before anything parses it into objects.

The server reads run folders it did not write (a colleague's, the original's releases, a download). Recorded
configs (ours and the original's, both written by OmegaConf) are small plain mappings: no YAML tags, no anchors or
aliases. So a config.yaml larger than a cap, not UTF-8, carrying a tag or an alias (nested aliases expand
exponentially when the config is built: a few hundred bytes can ask for GBs), or whose top level is not a mapping
is refused with one line naming the file, before the YAML loader or OmegaConf builds anything from it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from DiT4DiT.config.errors import ConfigError

# A recorded config is a few KiB (every key of the schema); anything this large was not written by a run.
MAX_CONFIG_BYTES = 1 << 20
_REFUSED_TOKENS = {yaml.TagToken: "a YAML tag", yaml.AnchorToken: "a YAML anchor", yaml.AliasToken: "a YAML alias"}


class RunFolderFileError(ConfigError):
    """A run folder file that is not what a run writes; the message names the file and what it holds."""


def read_run_config_file(path: Path) -> dict:
    """config.yaml as a plain mapping (nothing typed or checked yet), or RunFolderFileError naming what it holds
    instead."""
    fix = "restore the run's own config.yaml"
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise RunFolderFileError(f"{path}: {size} bytes; a run's config.yaml is a few KiB (at most {MAX_CONFIG_BYTES} "
                                 f"read); {fix}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RunFolderFileError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); {fix}") from None
    try:
        for token in yaml.scan(text):
            refused = _REFUSED_TOKENS.get(type(token))
            if refused:
                raise RunFolderFileError(f"{path}, line {token.start_mark.line + 1}: {refused}; a run's config.yaml "
                                         f"holds plain values only (no tags, anchors or aliases); {fix}")
        top = yaml.safe_load(text)  # no aliases and bounded in size: cheap to build
    except RecursionError:
        raise RunFolderFileError(f"{path}: nested deeper than the YAML reader follows; {fix}") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None else ""
        reason = " ".join(str(getattr(error, "problem", None) or error).split())
        raise RunFolderFileError(f"{path}{line}: not valid YAML ({reason}); {fix}") from None
    if not isinstance(top, dict):
        what = "nothing" if top is None else f"a {type(top).__name__}"
        raise RunFolderFileError(f"{path}: holds {what}, not a mapping of config sections; {fix}")
    return top
