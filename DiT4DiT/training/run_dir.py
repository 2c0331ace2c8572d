"""A run directory belongs to one run: refuse to start over an earlier run, and lock it while training.

The main process calls `claim_run_dir` before anything is written: without resume, a folder that already
holds a run is refused (or moved aside when the user asks), and a lock file (host, pid, start time) keeps a
second run with the same run_id out. A lock left by a dead process on this host is reported and taken over.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from accelerate.utils import broadcast_object_list

from DiT4DiT.dataloader.layout import is_dataset
from DiT4DiT.errors import DiT4DiTError

log = logging.getLogger(__name__)

LOCK_FILE = "run.lock"
LAUNCHER_LOG = "train.log"
# Files and folders only a trainer writes (the launcher's train.log alone is not a run).
RUN_MARKERS = ("config.yaml", "checkpoints", "final_model", "metrics.jsonl", "summary.jsonl", "dataset_statistics.json")
# What a start writes before its first step: alone, they are a start that never trained (stopped during set-up),
# which the next start reclaims instead of refusing.
SETUP_FILES = ("config.yaml", "dataset_statistics.json")


class RunDirError(DiT4DiTError, RuntimeError):
    """The run directory cannot be used as asked; nothing was written. Exit status 2."""

    exit_code = 2
    same_on_every_rank = True  # decided from shared files, the answer broadcast


def run_markers(run_dir: Path) -> list[str]:
    """What in `run_dir` shows that a run already trained there."""
    return [name for name in RUN_MARKERS if (run_dir / name).exists()]


def _moved_aside_name(run_dir: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    suffix = 1
    while target.exists():
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{suffix}")
        suffix += 1
    return target


def check_fresh_start(run_dir: Path, is_resume: bool, move_aside: bool, locked: bool = True) -> Path | None:
    """Refuse (or move aside) an earlier run in `run_dir` when this one does not resume it; reclaim the files of a
    start that never trained. Changes files only when `locked` (the lock held).

    Returns where the earlier run was moved, if it was.
    """
    found = run_markers(run_dir)
    if is_resume or not found:
        return None
    if set(found) <= set(SETUP_FILES):
        if locked:
            for name in found:
                (run_dir / name).unlink()
            log.warning("%s holds only the set-up files of a start that never trained (%s, no training state, no "
                        "metrics); reclaimed for this run", run_dir, ", ".join(found))
        return None
    if not move_aside:
        raise RunDirError(
            f"{run_dir} already holds a run ({', '.join(found)}); nothing was written. Choose one: continue it "
            f"with --trainer.is_resume true, start a new run with another --run_id, or move the old run aside "
            f"with --trainer.move_old_run true"
        )
    if run_dir.is_symlink():  # the run is another folder's: moving it would take that folder's run away
        raise RunDirError(
            f"{run_dir} is a symbolic link to {os.readlink(run_dir)}; --trainer.move_old_run would move the run in "
            "that folder (another run id's?) aside under this run id's name, so nothing was moved. Pick another "
            "--run_id, or move or remove the earlier run yourself")
    target = _moved_aside_name(run_dir)
    target.mkdir()
    for child in run_dir.iterdir():
        # The lock is this run's; the launcher's log is open for appending and records both runs.
        if child.name not in (LOCK_FILE, LAUNCHER_LOG):
            os.replace(child, target / child.name)
    log.warning("moved the earlier run in %s aside to %s (--trainer.move_old_run)", run_dir, target)
    return target


def _read_lock(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        # A lock cut off while being written: its writer died before starting any work.
        return {"host": socket.gethostname(), "pid": -1, "started": "unknown"}


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _is_stale(holder: dict) -> bool:
    """Only a lock of this host can be judged: a pid on another host means nothing here."""
    return holder.get("host") == socket.gethostname() and not _pid_alive(int(holder.get("pid", -1)))


def _in_use_message(run_dir: Path, holder: dict) -> str:
    return (
        f"{run_dir} is in use by another run (pid {holder.get('pid')} on host {holder.get('host')}, started "
        f"{holder.get('started')}; lock file {run_dir / LOCK_FILE}); nothing was written. Wait for it to end, stop "
        f"it, or pick another --run_id. If that process is gone (another host crashed), delete the lock file"
    )


class RunLock:
    """The lock file of a run directory, created exclusively; released when the run ends."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / LOCK_FILE
        self.record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_lock(self.path)
                if holder is None:
                    continue  # released between our attempt and the read
                if not _is_stale(holder):
                    raise RunDirError(_in_use_message(self.path.parent, holder)) from None
                log.warning("taking over the stale lock of %s: pid %s on this host (%s), started %s, is no longer "
                            "running", self.path.parent, holder.get("pid"), holder.get("host"), holder.get("started"))
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(self.record, handle)
            return self

    def release(self) -> None:
        if _read_lock(self.path) == self.record:
            self.path.unlink(missing_ok=True)


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Temporary files and staging folders a killed run left behind (only call while holding the lock)."""
    removed = []
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "final_model"):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith(".") and (path.name.endswith(".tmp") or path.name.endswith(".partial")):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path)
    if removed:
        log.warning("removed %d temporary file(s) left by an interrupted run in %s, e.g. %s", len(removed), run_dir,
                    removed[0].name)
    return removed


def check_not_a_dataset(run_dir: Path) -> None:
    """Datasets are read-only inputs: a run dir that is one, lies inside one, or holds one is refused (a run would
    be written into the dataset, and --trainer.move_old_run would move the dataset away)."""
    inside = next((p for p in [run_dir, *run_dir.parents] if is_dataset(p)), None)
    held = [] if inside or not run_dir.is_dir() else [p for p in run_dir.iterdir() if is_dataset(p)]
    if inside is not None or held:
        what = f"is inside the dataset {inside}" if inside is not None and inside != run_dir else (
            "is a dataset" if inside is not None else f"holds the dataset {held[0]}")
        raise RunDirError(f"run dir {run_dir} {what} (meta/info.json); nothing was written. Datasets are read-only "
                          "inputs: point --run_root_dir at a folder outside the data")


def claim_run_dir(run_dir: Path, is_resume: bool, move_aside: bool) -> RunLock:
    """Main process, before writing anything: take the lock, check the folder, clean up after a killed run.

    The refusals are checked once before the lock file is created, so a refused start leaves the folder
    untouched, and again under the lock, where no other run can change the answer.
    """
    check_not_a_dataset(run_dir)
    holder = _read_lock(run_dir / LOCK_FILE)
    if holder is not None and not _is_stale(holder):
        raise RunDirError(_in_use_message(run_dir, holder))
    if not move_aside:
        check_fresh_start(run_dir, is_resume, move_aside, locked=False)
    lock = RunLock(run_dir).acquire()
    try:
        check_fresh_start(run_dir, is_resume, move_aside)
    except BaseException:
        lock.release()
        raise
    remove_stale_temporaries(run_dir)
    return lock


class RunDirLostError(DiT4DiTError, RuntimeError):
    """The run directory stopped taking writes mid-run (deleted, made read-only, its permissions taken)."""


# What a write into a folder that was deleted, remounted read-only or chmod-ed under a running job fails with.
LOST_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EROFS, errno.EACCES, errno.EPERM, errno.ESTALE)


@contextmanager
def writes_lost_as_one_line(run_dir: Path):
    """A failed write into `run_dir` during training as a RunDirLostError naming the file and what to do."""
    try:
        yield
    except OSError as error:
        folder = Path(os.path.abspath(run_dir))
        where = Path(os.path.abspath(error.filename)) if isinstance(error.filename, str) else None
        if error.errno not in LOST_ERRNOS or where is None or folder not in (where, *where.parents):
            raise
        raise RunDirLostError(
            f"{where}: {error.strerror}: the run folder {run_dir} was deleted, made read-only or lost its "
            "permissions mid-run; the training states saved before stay as they are. Make it writable (or restore "
            "it), then continue with --trainer.is_resume true") from None


@contextmanager
def claimed(accelerator, run_dir: Path, is_resume: bool, move_old_run: bool):
    """The run directory (the config's output_dir) claimed by the main process for the duration of the run, as
    trainer.is_resume and trainer.move_old_run say; a refusal stops every rank."""
    lock, refusal = None, None
    created = _first_missing(run_dir)
    if accelerator.is_main_process:
        try:
            lock = claim_run_dir(run_dir, is_resume, move_old_run)
        except RunDirError as error:
            refusal = str(error)
    refusal = broadcast_object_list([refusal])[0]
    if refusal is not None:
        raise RunDirError(refusal)
    try:
        yield run_dir
    finally:
        if lock is not None:
            lock.release()
            _remove_if_empty(run_dir, created)


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (None if `path` exists)."""
    missing = None
    while not path.exists():
        missing, path = path, path.parent
    return missing


def _remove_if_empty(run_dir: Path, created: Path | None) -> None:
    """A start refused after taking the lock (a check of the config or the model) leaves no folder it made."""
    if created is None:
        return
    folder = run_dir
    while folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        if folder == created:
            break
        folder = folder.parent
