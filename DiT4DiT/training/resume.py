"""Strict resume: continue exactly what the run directory holds, or refuse and say why.

- `--trainer.is_resume true` needs a complete, verified training state (the newest whose files match its
  manifest; a damaged one falls back to the previous with a warning). None -> ResumeError (exit 2), unless
  `--trainer.resume_weights_only true` asks to continue from the newest steps_N_pytorch_model.pt (also a run
  of the original DiT4DiT): step N, the learning-rate schedule fast-forwarded, a fresh optimizer.
- Keys that change the model, the data order or the statistics must equal the saved config.yaml, unless
  named in `--trainer.resume_allow_changes`.
- The run's saved dataset_statistics.json stays its statistics: the data's normalisers are rebuilt from it.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from accelerate.utils import gather_object
from omegaconf import DictConfig, OmegaConf

from DiT4DiT.dataloader import save_dataset_statistics
from DiT4DiT.dataloader.transforms import Normalizer
from DiT4DiT.training import checkpoint as ckpt

log = logging.getLogger(__name__)

# Keys whose change a resumed run cannot honour: the model's shape, the data order, the statistics.
# A key naming a section covers every key below it.
COMPARED_KEYS = (
    "seed",
    "framework.name",
    "framework.cosmos25.training",
    "framework.cosmos25.extract_layer",
    "framework.cosmos25.vl_hidden_dim",
    "framework.cosmos25.max_sequence_length",
    "framework.action_model",
    "datasets.vla_data.data_mix",
    "datasets.vla_data.per_device_batch_size",
    "datasets.vla_data.video_delta_indices",
    "datasets.vla_data.action_video_freq_ratio",
    "datasets.vla_data.max_state_dim",
    "datasets.vla_data.max_action_dim",
    "datasets.vla_data.image_size",
    "datasets.vla_data.holdout_episodes",
    "datasets.vla_data.skip_non_finite_episodes",
    "trainer.gradient_accumulation_steps",
    "trainer.freeze_modules",
)
NUM_PROCESSES = "num_processes"
_ABSENT = object()
_WEIGHTS_FILE = re.compile(r"^steps_(\d+)_pytorch_model\.pt$")


class ResumeError(RuntimeError):
    """Resume cannot continue this run as asked; nothing was written. Exit status 2."""

    exit_code = 2


@dataclass(frozen=True)
class Resume:
    step: int
    weights: Path  # steps_N_pytorch_model.pt
    state: Path | None  # the training state folder; None for a weights-only resume

    @property
    def weights_only(self) -> bool:
        return self.state is None


def _leaves(cfg: DictConfig, key: str) -> dict[str, object]:
    value = OmegaConf.select(cfg, key, default=_ABSENT)
    if value is _ABSENT:
        return {}
    if isinstance(value, DictConfig):
        return {f"{key}.{k}": v for k, v in _flatten(OmegaConf.to_container(value)).items()}
    return {key: OmegaConf.to_container(value) if OmegaConf.is_config(value) else value}


def _flatten(node: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for name, value in node.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def allowed_changes(cfg: DictConfig) -> set[str]:
    return {k.strip() for k in str(cfg.trainer.resume_allow_changes or "").split(",") if k.strip()}


def config_changes(saved: DictConfig, current: DictConfig, allowed: set[str]) -> list[str]:
    """'key: old -> new' for each compared key that differs and is not allowed (by itself or a section).

    Keys the saved config lacks (an older trainer's, or the original DiT4DiT's) are not compared.
    """
    changes = []
    for key in COMPARED_KEYS:
        old, new = _leaves(saved, key), _leaves(current, key)
        for leaf in sorted(old):
            if old.get(leaf) != new.get(leaf) and not any(leaf == a or leaf.startswith(a + ".") for a in allowed):
                changes.append(f"{leaf}: {old.get(leaf)!r} -> {new.get(leaf)!r}")
    return changes


def check_config_unchanged(cfg: DictConfig, run_dir: Path, saved_processes: int | None, num_processes: int) -> None:
    saved_path = run_dir / "config.yaml"
    allowed = allowed_changes(cfg)
    changes = config_changes(OmegaConf.load(saved_path), cfg, allowed) if saved_path.is_file() else []
    if saved_processes is not None and saved_processes != num_processes:
        changes.append(f"{NUM_PROCESSES}: {saved_processes!r} -> {num_processes!r} (cannot change: each rank's random "
                       "state and optimizer shard are saved; pass --num_processes to match)")
    if changes:
        allowable = sorted({c.split(":")[0] for c in changes} - {NUM_PROCESSES})
        hint = f", or accept the change with --trainer.resume_allow_changes={','.join(allowable)}" if allowable else ""
        raise ResumeError(
            f"resume would change what the run in {run_dir} depends on (model shape, data order or statistics):\n  "
            + "\n  ".join(changes) + f"\nSet them back, or start a new run with another --run_id{hint}"
        )


def _verified_problems(state: Path, rank: int, world: int) -> list[str]:
    """Every rank checks its share of the files; all ranks get every problem (the same answer everywhere)."""
    return [problem for share in gather_object([ckpt.verify_share(state, rank, world)]) for problem in share]


def newest_weights(checkpoints_dir: Path) -> tuple[int, Path] | None:
    found = [(int(m.group(1)), p) for p in checkpoints_dir.glob("steps_*_pytorch_model.pt")
             if (m := _WEIGHTS_FILE.match(p.name))]
    return max(found) if found else None


def find_resume(cfg: DictConfig, run_dir: Path, rank: int, world: int) -> Resume | None:
    """The verified state to continue from (all ranks call this together), or None without trainer.is_resume."""
    if not cfg.trainer.is_resume:
        return None
    checkpoints_dir = run_dir / "checkpoints"
    rejected = []
    for state in reversed(ckpt.completed_states(checkpoints_dir)):
        problems = _verified_problems(state, rank, world)
        if problems:
            log.warning("training state %s fails its manifest check and is not used (falling back to the previous "
                        "state, if any):\n  %s", state, "\n  ".join(problems[:5]))
            rejected.append(f"{state.name}: {problems[0]}")
            continue
        trainer_state = ckpt.read_trainer_state(state)
        check_config_unchanged(cfg, run_dir, trainer_state["num_processes"], world)
        return Resume(trainer_state["step"], checkpoints_dir / trainer_state["weights"], state)
    if cfg.trainer.resume_weights_only:
        return _weights_only(cfg, run_dir, checkpoints_dir, world)
    found = f"; states refused: {'; '.join(rejected)}" if rejected else ""
    raise ResumeError(
        f"trainer.is_resume is set but {checkpoints_dir} holds no complete, verified training state{found}. Check "
        "--run_id and --run_root_dir; start a new run without --trainer.is_resume; or continue from the newest "
        "steps_N_pytorch_model.pt with a fresh optimizer: --trainer.resume_weights_only true"
    )


def _weights_only(cfg: DictConfig, run_dir: Path, checkpoints_dir: Path, world: int) -> Resume:
    newest = newest_weights(checkpoints_dir) if checkpoints_dir.is_dir() else None
    if newest is None:
        raise ResumeError(f"trainer.resume_weights_only: {checkpoints_dir} holds no steps_N_pytorch_model.pt; check "
                          "--run_id and --run_root_dir")
    check_config_unchanged(cfg, run_dir, None, world)
    step, weights = newest
    log.warning("WEIGHTS-ONLY RESUME from %s: step %d, learning-rate schedule fast-forwarded, but a FRESH optimizer "
                "(AdamW moments start at zero), fresh random state and no exact data position; the run will not "
                "match an uninterrupted one", weights, step)
    return Resume(step, weights, None)


def fast_forward(scheduler, steps: int) -> None:
    """Step the learning-rate schedule to where `steps` optimizer steps leave it (the optimizer is not stepped)."""
    for _ in range(steps):
        scheduler.step()


def use_saved_statistics(datasets, path: Path, is_main: bool) -> None:
    """Normalise with the run's saved statistics: its checkpoints are paired with them (the file is not rewritten).

    A run without the file (weights only, e.g. from the original DiT4DiT) gets the current data's statistics.
    """
    if not path.is_file():
        log.warning("%s does not exist: the statistics of the current data are written there and used", path)
        if is_main:
            save_dataset_statistics(datasets[0].statistics(), path)
        return
    saved = json.loads(path.read_text())
    for dataset in datasets:
        for tag, current in list(dataset.normalizers.items()):
            if tag not in saved:
                raise ResumeError(f"{path} has no statistics for embodiment '{tag}' of the current data; the data "
                                  "mix changed since the run started: start a new run with another --run_id")
            if dataset.statistics()[tag] != saved[tag]:
                log.warning("the data now gives other statistics for '%s' than %s (files changed on disk); the saved "
                            "ones stay in use", tag, path)
            dataset.normalizers[tag] = tuple(
                Normalizer(saved[tag][part].get("normalization", normalizer.modes.tolist()), saved[tag][part])
                for part, normalizer in zip(("state", "action"), current))
