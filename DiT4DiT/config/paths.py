"""A path the user gave, resolved: a symbolic link loop on the way is a ConfigError naming the key, not a traceback
(Python 3.10-3.12 raise RuntimeError from Path.resolve() there, later ones OSError)."""

from __future__ import annotations

from pathlib import Path

from DiT4DiT.config.errors import ConfigError


def resolved(path: Path, what: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError) as error:
        raise ConfigError(f"{what}: {path} cannot be resolved ({error}): a symbolic link loop on the way? Fix or "
                          "remove the link") from None
