"""Paths the config names: a path the user gave, resolved (a symbolic link loop on the way is a ConfigError naming
the key, not a traceback: Python 3.10-3.12 raise RuntimeError from Path.resolve() there, later ones OSError), and
the folders of the caches and stores the config places (free of torch, so the doctor can place them too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from DiT4DiT.config.errors import ConfigError


def resolved(path: Path, what: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError) as error:
        raise ConfigError(f"{what}: {path} cannot be resolved ({error}): a symbolic link loop on the way? Fix or "
                          "remove the link") from None


CACHE_ENV = "DIT4DIT_CACHE_DIR"
STORE_FOLDERS = {"prompt": "prompt_embeddings", "latent": "vae_latents"}
StoreKind = Literal["prompt", "latent"]


def cache_root(configured: str | os.PathLike[str] | None) -> Path:
    """`datasets.vla_data.cache_dir`, else $DIT4DIT_CACHE_DIR, else ~/.cache/dit4dit."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path.home() / ".cache" / "dit4dit"


def store_root(kind: StoreKind, store_dir: str | None, cache_dir: str | None) -> Path:
    """Where the `kind` store ("prompt", "latent") lives: framework.cosmos25.<kind>_store_dir, else
    <datasets.vla_data.cache_dir>/prompt_embeddings or vae_latents (ConfigSections.store_dir reads both keys)."""
    return Path(store_dir).expanduser() if store_dir else cache_root(cache_dir) / STORE_FOLDERS[kind]
