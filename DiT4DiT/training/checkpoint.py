"""Run-directory files: weights, resumable training states, config, summary. Every write is atomic.

Layout (the original's names, plus the training states it lacks):
    <run_dir>/config.yaml, dataset_statistics.json, summary.jsonl
    <run_dir>/checkpoints/steps_{N}_pytorch_model.pt        weights ({name: tensor}, frozen modules left out)
    <run_dir>/checkpoints/steps_{N}_training_state/         optimizer, scheduler, RNG, step (for --trainer.is_resume)
    <run_dir>/final_model/pytorch_model.pt
A file appears under its final name only once complete (temp file or folder + rename), so a run killed
while saving still has its previous checkpoint intact.

`Checkpointer` is the one home of what a training state holds: it saves one (weights, every rank's share,
manifest, publish, retention), finds and verifies the state to resume from, restores it, and writes the final
model; the functions below it are the file formats it is made of.

Integrity: a training state's completion marker (trainer_state.json) lists every file of the state and its
weights file with size and sha256. Resume verifies them before anything is loaded, so a file this trainer did
not write (or one cut short or altered since) is never unpickled. Every .pt file of the state, DeepSpeed's
included, is also opened with torch.load(weights_only=True, mmap=True) (the pickle is read, the tensors are not),
so a state whose manifest was forged to match a planted pickle is refused too; DeepSpeed's own loader then runs
with torch's weights-only unpickler forced on, allowing the few DeepSpeed types its states hold (DEEPSPEED_TYPES).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, broadcast_object_list, gather_object

from DiT4DiT import atomic_files
from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.recorded import recorded_yaml
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.errors import DiT4DiTError, TrainingError
from DiT4DiT.facts import is_under
from DiT4DiT.training.host_waits import HostWaits
from DiT4DiT.training.unwrap import full_state_dict

log = logging.getLogger(__name__)

STATE_SUFFIX = "_training_state"
_STATE_DIR = re.compile(r"^steps_(\d+)" + STATE_SUFFIX + "$")
TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest"
OWN_DIGEST = "sha256"  # of trainer_state.json's other fields: the manifest covers the file that holds it
CONFIG = "config.yaml"
FINAL_MODEL = Path("final_model") / "pytorch_model.pt"  # the weights the export and the policy server read
HASH_CHUNK = 16 * 2**20
DEEPSPEED_TAG = "deepspeed"  # DeepSpeed's own files, below the state folder (loaded by DeepSpeed)
# The non-torch types DeepSpeed 0.16's ZeRO-2/3 states pickle (found with torch.serialization's
# get_unsafe_globals_in_checkpoint on states of our runs): plain records, rebuilt from their fields.
DEEPSPEED_TYPES = ("deepspeed.runtime.zero.config:ZeroStageEnum", "deepspeed.utils.tensor_fragment:fragment_address",
                   "deepspeed.runtime.fp16.loss_scaler:LossScaler", "deepspeed.runtime.fp16.loss_scaler:DynamicLossScaler")
FORCE_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"  # torch.load reads it on every call, over weights_only=False
_WEIGHTS_FILE = re.compile(r"^steps_(\d+)_pytorch_model\.pt$")


class DiskFullError(DiT4DiTError, RuntimeError):
    """A save failed for lack of space; the message names the path and what to do."""


class ResumeError(DiT4DiTError, RuntimeError):
    """Resume cannot continue this run as asked; nothing was written. Exit status 2."""

    exit_code = 2
    same_on_every_rank = True  # decided from shared files, the answer gathered


@dataclass(frozen=True)
class Resume:
    """The verified state a run continues from."""

    step: int
    weights: Path  # steps_N_pytorch_model.pt
    state: Path | None  # the training state folder; None for a weights-only resume
    num_processes: int | None  # of the run that wrote the state (None for weights only)

    @property
    def weights_only(self) -> bool:
        return self.state is None


class Checkpointer:
    """Saves, finds, verifies and restores this run's training states, and writes its final model.

    Collective where noted: every rank calls those together. `left_out` are the module paths checkpoints
    leave out (frozen modules, which reload from the base snapshot); `waits`: where the ranks wait while the main
    process writes (host_waits.py: on the host, with its own timeout).
    """

    def __init__(self, accelerator: Accelerator, run_dir: Path, left_out: list[str], keep_last: int,
                 waits: HostWaits):
        self.accelerator, self.run_dir, self.left_out, self.keep_last = accelerator, run_dir, left_out, keep_last
        self.waits = waits
        self.checkpoints_dir = run_dir / "checkpoints"
        self.deepspeed = accelerator.distributed_type == DistributedType.DEEPSPEED

    def state_dir(self, step: int) -> Path:
        return state_dir(self.checkpoints_dir, step)

    # --- resume ---------------------------------------------------------------------------------------------

    def find(self, weights_only_fallback: bool) -> Resume:
        """Collective. The newest state whose files pass verification (a refused one falls back to the previous,
        with a warning); else, when asked, the newest weights file; else ResumeError."""
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        rejected = []
        for state in reversed(completed_states(self.checkpoints_dir)):
            # Every rank checks its share of the files; all ranks get every problem (the same answer everywhere).
            problems = [problem for share in gather_object([verify_share(state, rank, world)]) for problem in share]
            if problems:
                log.warning("training state %s fails its manifest check and is not used (falling back to the "
                            "previous state, if any):\n  %s", state, "\n  ".join(problems[:5]))
                rejected.append(f"{state.name}: {problems[0]}")
                continue
            trainer_state = read_trainer_state(state)
            return Resume(trainer_state["step"], self.checkpoints_dir / trainer_state["weights"], state,
                          trainer_state["num_processes"])
        if weights_only_fallback:
            return self._newest_weights_only()
        found = f"; states refused: {'; '.join(rejected)}" if rejected else ""
        raise ResumeError(
            f"trainer.is_resume is set but {self.checkpoints_dir} holds no complete, verified training state{found}. "
            "Check --run_id and --run_root_dir; start a new run without --trainer.is_resume; or continue from the "
            "newest steps_N_pytorch_model.pt with a fresh optimizer: --trainer.resume_weights_only true"
        )

    def _newest_weights_only(self) -> Resume:
        newest = newest_weights(self.checkpoints_dir) if self.checkpoints_dir.is_dir() else None
        if newest is None:
            raise ResumeError(f"trainer.resume_weights_only: {self.checkpoints_dir} holds no steps_N_pytorch_model.pt; "
                              "check --run_id and --run_root_dir")
        step, weights = newest
        log.warning("WEIGHTS-ONLY RESUME from %s: step %d, learning-rate schedule fast-forwarded, but a FRESH optimizer "
                    "(AdamW moments start at zero), fresh random state and no exact data position; the run will not "
                    "match an uninterrupted one", weights, step)
        return Resume(step, weights, None, None)

    def restore(self, state: Path, model, optimizer, scheduler) -> None:
        """Optimizer, scheduler and this rank's RNG (the weights were loaded before accelerator.prepare)."""
        if self.deepspeed:
            with weights_only_loads(deepspeed_types()):
                model.load_checkpoint(str(state), tag=DEEPSPEED_TAG, load_module_strict=False)
        else:
            optimizer.load_state_dict(torch.load(state / "optimizer.pt", map_location="cpu", weights_only=True))
        scheduler.load_state_dict(torch.load(state / "scheduler.pt", weights_only=True))
        try:
            load_rank_rng(state, self.accelerator.process_index, self.accelerator.device)
        except FileNotFoundError as error:  # raised on purpose: this rank has no RNG state in a smaller run's state
            raise TrainingError(str(error)) from None

    # --- save -----------------------------------------------------------------------------------------------

    def save(self, step: int, model, optimizer, scheduler) -> Path:
        """Collective: weights from the main process, every rank's share of the training state, a manifest
        hashed by all ranks, published atomically; older states beyond keep_last are deleted."""
        accelerator, checkpoints_dir = self.accelerator, self.checkpoints_dir
        is_main = accelerator.is_main_process
        staging = staging_dir(checkpoints_dir, step)
        weights = weights_path(checkpoints_dir, step)
        state_dict = full_state_dict(accelerator, model)  # every rank: ZeRO-3 gathers the shards here
        if is_main:
            save_weights(weights_to_save(state_dict, self.left_out), weights)
            append_summary(self.run_dir, step)
            discard_partial(staging)
        self.waits.barrier()  # the main process may write for longer than a device collective waits
        main_only = {"scheduler": scheduler if is_main else None}
        if self.deepspeed:
            space_checked(staging, lambda: model.save_checkpoint(str(staging), tag=DEEPSPEED_TAG,
                                                                 exclude_frozen_parameters=True))
        else:
            main_only["optimizer"] = optimizer if is_main else None
        save_rank_state(staging, accelerator.process_index, accelerator.device, **main_only)
        if is_main and (self.run_dir / CONFIG).is_file():  # a copy to restore config.yaml from (in the manifest)
            shutil.copyfile(self.run_dir / CONFIG, staging / CONFIG)
        self.waits.barrier()
        # Every rank hashes a share of the files (the list comes from the main process, so all hash the same list).
        names = broadcast_object_list([manifest_names(staging, weights) if is_main else None])[0]
        shares = gather_object([manifest_share(staging, names, accelerator.process_index, accelerator.num_processes)])
        if is_main:
            trainer_state = {"step": step, "weights": weights.name, "num_processes": accelerator.num_processes,
                             MANIFEST: {name: digest for share in shares for name, digest in share.items()}}
            trainer_state[OWN_DIGEST] = own_digest(trainer_state)
            publish_state(checkpoints_dir, step, trainer_state, keep_last=self.keep_last)
        self.waits.barrier()
        return self.state_dir(step)

    def save_final(self, model) -> Path:
        """Collective: final_model/pytorch_model.pt, the weights the export and the policy server read."""
        path = self.run_dir / FINAL_MODEL
        state_dict = full_state_dict(self.accelerator, model)  # every rank: ZeRO-3 gathers the shards here
        if self.accelerator.is_main_process:
            save_weights(weights_to_save(state_dict, self.left_out), path)
        self.waits.barrier()  # before the next device collective (the replica comparison)
        return path


def original_server_note(save_full_state_dict: bool, run_dir: Path) -> str:
    """The line training ends with: how the original DiT4DiT's server loads this run's final model."""
    final = run_dir / FINAL_MODEL
    if save_full_state_dict:
        return f"{final} holds every weight: the original's server loads it as it is (--ckpt_path {final})"
    full = final.with_name("full_pytorch_model.pt")
    return (f"{final} leaves out the frozen modules (they reload from framework.cosmos25.base_model); for the "
            f"original's server, which loads every weight: python -m DiT4DiT.tools.export_checkpoint {final} --out {full}")


def newest_weights(checkpoints_dir: Path) -> tuple[int, Path] | None:
    found = [(int(m.group(1)), p) for p in checkpoints_dir.glob("steps_*_pytorch_model.pt")
             if (m := _WEIGHTS_FILE.match(p.name))]
    return max(found) if found else None


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


def space_checked(path: Path, write: Callable[[], object]) -> None:
    try:
        write()
    except (OSError, RuntimeError) as error:
        message = explain_disk_full(error, path)
        if message is None:
            raise
        raise DiskFullError(message) from error


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file beside `path` (see DiT4DiT.atomic_files); a full disk is a DiskFullError."""
    atomic_files.atomic_write(path, lambda tmp: space_checked(path, lambda: write(tmp)))


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def save_config(cfg: ConfigSections, path: Path) -> None:
    """The run folder's config.yaml, as DiT4DiT/config/recorded.py records it."""
    write_text(path, recorded_yaml(cfg))


def append_summary(run_dir: Path, step: int) -> None:
    """summary.jsonl: one {"steps": N} line per saved checkpoint, as in the original."""
    path = run_dir / "summary.jsonl"
    previous = path.read_text() if path.exists() else ""
    write_text(path, previous + json.dumps({"steps": step}) + "\n")


def weights_to_save(state_dict: dict[str, torch.Tensor], frozen_modules: list[str]) -> dict[str, torch.Tensor]:
    """The weights a checkpoint keeps: everything but frozen modules (which reload from the base snapshot)."""
    return {k: v.detach().cpu().contiguous() for k, v in state_dict.items() if not is_under(k, frozen_modules)}


def save_weights(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(state_dict, tmp))


def load_weights(path: Path, setting: str = "trainer.pretrained_checkpoint") -> dict[str, torch.Tensor]:
    """A weights file ({name: tensor}); one that is not (garbage, another format) is a ConfigError naming `setting`,
    the key that pointed at it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # bytes that are no checkpoint: the unpickler raises IndexError, KeyError, ... too
        raise ConfigError(f"{setting}: {path} is not a weights file ({type(error).__name__}: {_first_line(error)}); "
                          "point it at a steps_N_pytorch_model.pt or final_model/pytorch_model.pt of a run") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{setting}: {path} holds a {type(state).__name__}, not a dict of tensors; point it at a "
                          "steps_N_pytorch_model.pt or final_model/pytorch_model.pt of a run")
    return state


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
    legacy = np.random.get_state()  # the default, legacy form: numpy types it as one union with the dict form
    assert isinstance(legacy, tuple)
    kind, np_keys, np_pos, np_has_gauss, np_gauss = legacy
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
        problems += trainer_state_problems(state, read_trainer_state(state))
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
        elif path.suffix == ".pt" and (refusal := tensor_file_refusal(path, name.startswith(DEEPSPEED_TAG + "/"))):
            problems.append(f"{path}: {refusal}")
    return problems


def own_digest(trainer_state: dict) -> str:
    fields = {k: v for k, v in trainer_state.items() if k != OWN_DIGEST}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def trainer_state_problems(state: Path, trainer_state: dict) -> list[str]:
    """The marker's own fields: its step is its folder's, its weights the sibling file of that step (never a path
    elsewhere), and nothing changed since it was written (states of older trainers have no digest)."""
    named = _STATE_DIR.match(state.name)
    if named is None:
        return [f"{state}: not a training state's folder (steps_N{STATE_SUFFIX})"]
    path, step = state / TRAINER_STATE, int(named.group(1))
    problems = []
    if trainer_state.get("step") != step:
        problems.append(f"{path}: step {trainer_state.get('step')!r}, but the folder is step {step}")
    expected = weights_path(state.parent, step).name
    if trainer_state.get("weights") != expected:
        problems.append(f"{path}: weights {trainer_state.get('weights')!r}, but a state's weights are {expected} "
                        "beside it")
    if OWN_DIGEST in trainer_state and trainer_state[OWN_DIGEST] != own_digest(trainer_state):
        problems.append(f"{path}: edited since it was written (its sha256 differs)")
    return problems


def deepspeed_types() -> list[type]:
    """DEEPSPEED_TYPES, imported (only where a state holds DeepSpeed files: importing deepspeed takes seconds)."""
    import importlib

    found = []
    for spec in DEEPSPEED_TYPES:
        module, name = spec.split(":")
        found.append(getattr(importlib.import_module(module), name))
    return found


@contextlib.contextmanager
def weights_only_loads(allowed: list[type]):
    """Every torch.load in the block uses the weights-only unpickler (also where a library passes weights_only=False),
    with `allowed` types besides torch's own."""
    before = os.environ.get(FORCE_WEIGHTS_ONLY)
    os.environ[FORCE_WEIGHTS_ONLY] = "1"
    try:
        with torch.serialization.safe_globals(allowed):
            yield
    finally:
        if before is None:
            os.environ.pop(FORCE_WEIGHTS_ONLY, None)
        else:
            os.environ[FORCE_WEIGHTS_ONLY] = before


def tensor_file_refusal(path: Path, deepspeed: bool = False) -> str | None:
    """Why torch.load(weights_only=True) refuses `path` (a DeepSpeed file: with its types allowed), or None.
    Memory-mapped: only the pickle is read."""
    try:
        with torch.serialization.safe_globals(deepspeed_types() if deepspeed else []):
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # as in load_weights: any type, for bytes that are no checkpoint
        return f"refused by torch.load(weights_only=True), not a file of tensors this trainer wrote ({_first_line(error)})"
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:120] if text else type(error).__name__


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
