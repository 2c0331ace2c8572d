"""Atomic file writes, shared by the trainer, the data cache, the prompt store and the tools (stdlib only).

A file appears under its final name only once complete: it is written to a temporary file in the same folder
and renamed over the target, so a reader (or a run killed mid-write) never sees half a file. A folder is written
beside its target and swapped in by `replace_folder`, which keeps the old one until the new one is in place.
A folder a tool writes (`write_marked_folder`) carries a WRITTEN_BY marker naming the tool: what may replace it
later (host/output_paths.check_replaceable) is decided by that marker alone.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> None:
    """Call `write(tmp_path)` on a temporary file beside `path` (what it returns is ignored), then rename it to
    `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, content) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(content, indent=2)))


def write_bytes_atomic(path: str | os.PathLike, payload: bytes) -> None:
    atomic_write(path, lambda tmp: tmp.write_bytes(payload))


def replace_folder(staging: Path, target: Path) -> None:
    """Rename the complete folder `staging` to `target` (beside it), replacing what is there. The old folder is
    renamed aside first and removed only once the new one is in place, so a kill between the two renames leaves it
    as .<name>.replaced-<pid> beside `target`, never deleted (removing it first lost both)."""
    if not target.exists():
        staging.rename(target)
        return
    aside = target.with_name(f".{target.name}.replaced-{os.getpid()}")
    target.rename(aside)
    try:
        staging.rename(target)
    except BaseException:
        aside.rename(target)
        raise
    shutil.rmtree(aside)


WRITTEN_BY = ".written_by"  # in a folder a tool wrote: the tool's name, so that --overwrite replaces only its own


def write_marked_folder(out: Path, tool: str, write: Callable[[Path], None]) -> Path:
    """`write(staging)` fills a folder beside `out`, which, marked as `tool`'s, then replaces `out` (replace_folder):
    a failure leaves `out` as it was, and a reader never sees half a folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write(staging)
        mark_written_by(staging, tool)
        replace_folder(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out


def mark_written_by(folder: Path, tool: str) -> None:
    (folder / WRITTEN_BY).write_text(tool + "\n")


def written_by(folder: Path, tool: str) -> bool:
    try:
        return (folder / WRITTEN_BY).read_text().strip() == tool
    except (OSError, UnicodeDecodeError):
        return False
