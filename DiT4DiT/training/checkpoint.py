"""Run-directory files: weights, resumable training states, config, summary. Every write is atomic.

Layout (the original's names, plus the training states it lacks):
    <run_dir>/config.yaml, dataset_statistics.json, summary.jsonl
    <run_dir>/checkpoints/steps_{N}_pytorch_model.pt        weights ({name: tensor}, frozen modules left out)
    <run_dir>/checkpoints/steps_{N}_training_state/         optimizer, scheduler, RNG, step (for --trainer.is_resume)
    <run_dir>/final_model/pytorch_model.pt
A file appears under its final name only once complete (temp file or folder + rename), so a run killed
while saving still has its previous checkpoint intact.

Integrity: a training state's completion marker (trainer_state.json) lists every file of the state and its
weights file with size and sha256. Resume verifies them before anything is loaded, so a file this trainer did
not write (or one cut short or altered since) is never unpickled; DeepSpeed's own loader needs pickle.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from DiT4DiT import atomic_files
from DiT4DiT.errors import DiT4DiTError

STATE_SUFFIX = "_training_state"
_STATE_DIR = re.compile(r"^steps_(\d+)" + STATE_SUFFIX + "$")
TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest"
HASH_CHUNK = 16 * 2**20


class DiskFullError(DiT4DiTError, RuntimeError):
    """A save failed for lack of space; the message names the path and what to do."""


def explain_disk_full(error: BaseException, path: Path) -> str | None:
    """'no space left on device at <path>' when `error` is a failed write for lack of space, else None.

    torch.save reports a short write as RuntimeError('... unexpected pos ...'), without the errno.
    """
    full = isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)
    short_write = isinstance(error, RuntimeError) and ("unexpected pos" in str(error) or "file write failed" in str(error))
    if not (full or short_write):
        return None
    return (f"no space left on device at {path} (or the disk quota is used up); the previous checkpoint is intact. "
            "Free space or point --run_root_dir elsewhere, then continue with --trainer.is_resume true")


def space_checked(path: Path, write: Callable[[], None]) -> None:
    try:
        write()
    except (OSError, RuntimeError) as error:
        message = explain_disk_full(error, path)
        if message is None:
            raise
        raise DiskFullError(message) from error


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file beside `path` (see DiT4DiT.atomic_files); a full disk is a DiskFullError."""
    atomic_files.atomic_write(path, lambda tmp: space_checked(path, lambda: write(tmp)))


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def save_config(cfg: DictConfig, path: Path) -> None:
    write_text(path, OmegaConf.to_yaml(cfg, resolve=True))


def append_summary(run_dir: Path, step: int) -> None:
    """summary.jsonl: one {"steps": N} line per saved checkpoint, as in the original."""
    path = run_dir / "summary.jsonl"
    previous = path.read_text() if path.exists() else ""
    write_text(path, previous + json.dumps({"steps": step}) + "\n")


def weights_to_save(state_dict: dict[str, torch.Tensor], frozen_prefixes: list[str]) -> dict[str, torch.Tensor]:
    """The weights a checkpoint keeps: everything but frozen modules (which reload from the base snapshot)."""
    prefixes = tuple(p + "." for p in frozen_prefixes)
    return {k: v.detach().cpu().contiguous() for k, v in state_dict.items() if not k.startswith(prefixes)}


def save_weights(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(state_dict, tmp))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def weights_path(checkpoints_dir: Path, step: int) -> Path:
    return checkpoints_dir / f"steps_{step}_pytorch_model.pt"


def state_dir(checkpoints_dir: Path, step: int) -> Path:
    return checkpoints_dir / f"steps_{step}{STATE_SUFFIX}"


def staging_dir(checkpoints_dir: Path, step: int) -> Path:
    """Where all ranks write a training state before it is published under its final name."""
    return checkpoints_dir / f".steps_{step}{STATE_SUFFIX}.partial"


def rng_state(device: torch.device) -> dict:
    """Every RNG the step draws from, as tensors and ints so it loads with weights_only=True."""
    version, mt_state, gauss = random.getstate()
    kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": [version, torch.tensor(mt_state, dtype=torch.int64), gauss],
        "numpy": [kind, torch.from_numpy(np_keys.astype(np.int64)), np_pos, np_has_gauss, np_gauss],
        "torch": torch.get_rng_state(),
    }
    if device.type != "cpu":
        state["device"] = torch.get_device_module(device).get_rng_state(device)
    return state


def restore_rng_state(state: dict, device: torch.device) -> None:
    version, mt_state, gauss = state["python"]
    random.setstate((version, tuple(mt_state.tolist()), gauss))
    kind, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((kind, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if "device" in state:
        torch.get_device_module(device).set_rng_state(state["device"], device)


def save_rank_state(staging: Path, rank: int, device: torch.device, optimizer=None, scheduler=None) -> None:
    """This rank's share of a training state (RNG always; optimizer and scheduler where given)."""
    staging.mkdir(parents=True, exist_ok=True)
    save_checked(rng_state(device), staging / f"rng_rank{rank}.pt")
    if optimizer is not None:
        save_checked(optimizer.state_dict(), staging / "optimizer.pt")
    if scheduler is not None:
        save_checked(scheduler.state_dict(), staging / "scheduler.pt")


def save_checked(obj, path: Path) -> None:
    """torch.save into a staging folder; a full disk is reported as such."""
    space_checked(path, lambda: torch.save(obj, path))


def file_digest(path: Path) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


def manifest_names(staging: Path, weights: Path) -> list[str]:
    """Every file of a training state, relative to its folder, and its weights file (a sibling of the folder)."""
    names = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file() and p.name != TRAINER_STATE)
    return names + [f"../{weights.name}"]


def manifest_share(staging: Path, names: list[str], rank: int, world: int) -> dict[str, dict]:
    """This rank's share of the hashing (every world-th file): the ranks of a node read in parallel."""
    return {name: file_digest(staging / name) for name in names[rank::world]}


def verify_share(state: Path, rank: int, world: int) -> list[str]:
    """Problems with this rank's share of a published state's files (size first, then sha256)."""
    try:
        manifest = read_trainer_state(state)[MANIFEST]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{state / TRAINER_STATE}: no readable manifest (not written by this trainer, or cut off)"]
    problems = []
    if rank == 0:
        present = {str(p.relative_to(state)) for p in state.rglob("*") if p.is_file() and p.name != TRAINER_STATE}
        problems += [f"{state / name}: not in the manifest" for name in sorted(present - set(manifest))]
    for name in sorted(manifest)[rank::world]:
        path, expected = state / name, manifest[name]
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != expected["size"]:
            problems.append(f"{path}: {path.stat().st_size} bytes, the manifest says {expected['size']}")
        elif file_digest(path)["sha256"] != expected["sha256"]:
            problems.append(f"{path}: sha256 differs from the manifest")
    return problems


def discard_partial(staging: Path) -> None:
    """Remove what a run killed mid-save left behind, before writing a new state there."""
    if staging.exists():
        shutil.rmtree(staging)


def publish_state(checkpoints_dir: Path, step: int, trainer_state: dict, keep_last: int) -> Path:
    """Main process only, after every rank wrote its share: mark complete, rename, prune old states.

    `trainer_state` carries the manifest; the marker is written last (atomically), so a folder with a marker
    holds every file it lists.
    """
    staging = staging_dir(checkpoints_dir, step)
    write_text(staging / TRAINER_STATE, json.dumps(trainer_state, indent=2))
    final = state_dir(checkpoints_dir, step)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    for old in completed_states(checkpoints_dir)[:-keep_last]:
        shutil.rmtree(old)
    return final


def completed_states(checkpoints_dir: Path) -> list[Path]:
    """Published training states, oldest first."""
    if not checkpoints_dir.is_dir():
        return []
    found = []
    for child in checkpoints_dir.iterdir():
        match = _STATE_DIR.match(child.name)
        if match and (child / TRAINER_STATE).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def read_trainer_state(state: Path) -> dict:
    return json.loads((state / TRAINER_STATE).read_text())


def load_rank_rng(state: Path, rank: int, device: torch.device) -> None:
    path = state / f"rng_rank{rank}.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; this training state was written by a run with fewer processes. "
            f"Resume with the same --num_processes as the run that wrote it"
        )
    restore_rng_state(torch.load(path, map_location="cpu", weights_only=True), device)
