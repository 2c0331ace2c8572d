"""A content-keyed cache outside the dataset folders (statistics, step indexes), written atomically."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from DiT4DiT.dataloader.reader import DatasetLayout

log = logging.getLogger(__name__)


def fingerprint(layout: DatasetLayout, settings: dict) -> str:
    """Hash of the meta files, each episode parquet's name/size/mtime, and the settings that shape the result."""
    digest = hashlib.sha256()
    for path in layout.meta_files():
        digest.update(str(path.relative_to(layout.root / "meta")).encode())
        digest.update(path.read_bytes())
    for episode in sorted(layout.episodes):
        path = layout.parquet_path(episode)
        try:
            stat = path.stat()
        except FileNotFoundError:
            # The scan that follows reports the missing file with its episode; the key only needs to differ.
            digest.update(f"{path.relative_to(layout.root)}:missing".encode())
            continue
        digest.update(f"{path.relative_to(layout.root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def cache_file(root: Path, layout: DatasetLayout, kind: str, key: str) -> Path:
    safe_name = "".join(c if c.isalnum() or c in "._-" else "_" for c in layout.name)
    return root / kind / f"{safe_name}-{key}.json"


def read_cached(path: Path) -> dict | None:
    """The cached JSON at `path`, or None when absent or unreadable (it is then rebuilt)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("ignoring unreadable cache file %s (%s); rebuilding it", path, exc)
        return None


