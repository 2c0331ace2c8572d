"""Run-directory files: weights, resumable training states, config, summary. Every write is atomic.

Layout (the original's names, plus the training states it lacks):
    <run_dir>/config.yaml, dataset_statistics.json, summary.jsonl
    <run_dir>/checkpoints/steps_{N}_pytorch_model.pt        weights ({name: tensor}, frozen modules left out)
    <run_dir>/checkpoints/steps_{N}_training_state/         optimizer, scheduler, RNG, step (for --trainer.is_resume)
    <run_dir>/final_model/pytorch_model.pt
A file appears under its final name only once complete (temp file or folder + rename), so a run killed
while saving still has its previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

STATE_SUFFIX = "_training_state"
_STATE_DIR = re.compile(r"^steps_(\d+)" + STATE_SUFFIX + "$")
TRAINER_STATE = "trainer_state.json"


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp_path)` on a temp file beside `path`, then rename it to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    torch.save(rng_state(device), staging / f"rng_rank{rank}.pt")
    if optimizer is not None:
        torch.save(optimizer.state_dict(), staging / "optimizer.pt")
    if scheduler is not None:
        torch.save(scheduler.state_dict(), staging / "scheduler.pt")


def discard_partial(staging: Path) -> None:
    """Remove what a run killed mid-save left behind, before writing a new state there."""
    if staging.exists():
        shutil.rmtree(staging)


def publish_state(checkpoints_dir: Path, step: int, trainer_state: dict, keep_last: int) -> Path:
    """Main process only, after every rank wrote its share: mark complete, rename, prune old states."""
    staging = staging_dir(checkpoints_dir, step)
    (staging / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2))
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
