"""What an output path (a tool's --out, an evaluation's --cache_dir, Meta-World's collected dataset) may be: a
regular file (or folder) the program creates or replaces, never something else.

The tools write atomically (a temporary file renamed over the target), so whatever sits at --out is replaced:
as root, `--out /dev/null` would turn the machine's /dev/null into a regular file. A target that exists must
be of the kind the tool writes, and a target inside a LeRobot dataset or a training run folder other than the
one the tool was given is refused, so a tool never writes into data or a run it does not own.

A folder a tool writes holds a WRITTEN_BY marker naming the tool, and --overwrite replaces only a folder marked as
that tool's (or an empty one): a downloaded snapshot or a recorded dataset looks like what the tool writes, but
never carries the marker, so it is never deleted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from DiT4DiT.atomic_files import WRITTEN_BY, written_by
from DiT4DiT.dataloader.layout import DATASET_MARK, is_dataset
from DiT4DiT.errors import DiT4DiTError

RUN_MARKS = ("checkpoints", "run.lock", "metrics.jsonl", "final_model")  # with config.yaml: a training run folder


class OutputError(DiT4DiTError):
    """--out names something the tool must not replace or write into."""

    exit_code = 2


def kind_of(path: Path) -> str:
    """What is at `path` (links followed), in words."""
    mode = os.stat(path).st_mode
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def is_run_dir(folder: Path) -> bool:
    return (folder / "config.yaml").is_file() and any((folder / mark).exists() for mark in RUN_MARKS)


def foreign_owner(out: Path, owned: Path | None) -> str | None:
    """The dataset or run folder `out` lies in (or is), unless it is `owned`: a description, or None."""
    out = out.resolve()
    owned = owned.resolve() if owned is not None else None
    for folder in [out, *out.parents]:
        if folder == owned:
            return None
        if folder.is_dir() and is_dataset(folder):
            return f"the LeRobot dataset {folder} ({DATASET_MARK} there)"
        if folder.is_dir() and is_run_dir(folder):
            return f"the training run folder {folder} (config.yaml and checkpoints there)"
    return None


def check_out(out: Path, *, folder: bool = False, owned: Path | None = None, option: str = "--out") -> None:
    """OutputError unless `out` is new or of the kind written (a regular file; with folder, a folder), and not
    inside a dataset or run folder other than `owned`."""
    wanted = "a folder" if folder else "a regular file"
    if out.exists() or out.is_symlink():
        try:
            found = kind_of(out)
        except OSError as error:  # a dangling or looping link
            raise OutputError(f"{option} {out}: cannot be used ({error.strerror}); give a new path or {wanted}") from None
        if found != wanted:
            raise OutputError(f"{option} {out} is {found}; it must be {wanted} or a new path (the tool replaces what "
                              "is there), so give another path")
    owner = foreign_owner(out, owned)
    if owner:
        raise OutputError(f"{option} {out} lies inside {owner}, which this tool does not write into; write it elsewhere")


def contents(folder: Path) -> str:
    """What a non-empty folder holds, in words."""
    if is_dataset(folder):
        return f"a LeRobot dataset ({DATASET_MARK})"
    if is_run_dir(folder):
        return "a training run (config.yaml and checkpoints)"
    names = sorted(entry.name for entry in folder.iterdir())
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} {'entry' if len(names) == 1 else 'entries'} ({shown})"


def check_replaceable(folder: Path, tool: str, *, overwrite: bool, option: str = "--out",
                      ours: Callable[[Path], bool] | None = None) -> None:
    """OutputError unless writing `folder` loses nothing: it is new or empty, or --overwrite was given and `tool`
    wrote it (its WRITTEN_BY marker; `ours(folder)`: one it wrote before it marked its folders)."""
    if not (folder.is_dir() and any(folder.iterdir())):
        return
    if not overwrite:
        raise OutputError(f"{option} {folder} exists and is not empty; pass --overwrite to replace it")
    if written_by(folder, tool) or (ours is not None and ours(folder)):
        return
    raise OutputError(f"{option} {folder} holds {contents(folder)} but no {WRITTEN_BY} naming {tool}: not a folder "
                      f"this tool wrote, so --overwrite will not delete it; give another {option} or delete it "
                      "yourself")
