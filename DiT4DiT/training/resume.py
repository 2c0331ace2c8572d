"""Strict resume: what a resumed run must keep from the run it continues.

Which state to continue from (verified, or weights only) is the Checkpointer's (DiT4DiT/training/checkpoint.py).
- Keys that change the model, the data order or the statistics must equal the saved config.yaml, unless
  named in `--trainer.resume_allow_changes`; a change is a ResumeError (exit 2).
- The run's saved dataset_statistics.json stays its statistics: the data's normalisers are rebuilt from it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from typing import Any

from DiT4DiT.config.recorded import read_config_values, recorded_values
from DiT4DiT.config.schema import ConfigError, leaves
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.config.typed import value_at
from DiT4DiT.dataloader import save_dataset_statistics
from DiT4DiT.dataloader.transforms import Normalizer
from DiT4DiT.facts import is_under
from DiT4DiT.training.checkpoint import CONFIG, Resume, ResumeError

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
    "datasets.vla_data.data_config",
    "datasets.vla_data.views",
    "datasets.vla_data.mask_padded_actions",
    "datasets.vla_data.statistics",
    "datasets.vla_data.per_device_batch_size",
    "datasets.vla_data.video_delta_indices",
    "datasets.vla_data.action_video_freq_ratio",
    "datasets.vla_data.max_state_dim",
    "datasets.vla_data.max_action_dim",
    "datasets.vla_data.image_size",
    "datasets.vla_data.holdout_episodes",
    "datasets.vla_data.skip_non_finite_episodes",
    "datasets.vla_data.image_augmentation",
    "trainer.gradient_accumulation_steps",
    "trainer.freeze_modules",
)
NUM_PROCESSES = "num_processes"
_ABSENT = object()


def _leaves(values: dict[str, Any], key: str) -> dict[str, object]:
    value = value_at(values, key, _ABSENT)
    if value is _ABSENT:
        return {}
    if isinstance(value, dict):
        return dict(leaves(value, f"{key}."))
    return {key: value}


def allowed_changes(resume_allow_changes: str | None) -> set[str]:
    """The keys trainer.resume_allow_changes lists."""
    return {k.strip() for k in str(resume_allow_changes or "").split(",") if k.strip()}


def config_changes(saved: Any, current: Any, allowed: set[str]) -> list[str]:
    """'key: old -> new' for each compared key that differs and is not allowed (by itself or a section); both configs
    as a run folder records them (typed, a loaded tree or a mapping; computed defaults resolved, so a recorded DiT size
    equals a null one).

    Keys the saved config lacks (an older trainer's, or the original DiT4DiT's) are not compared, nor keys the
    current config no longer has (read by nobody, see UNUSED_BY_THE_ORIGINAL in the schema).
    """
    changes = []
    saved_values, current_values = recorded_values(saved), recorded_values(current)
    for key in COMPARED_KEYS:
        old, new = _leaves(saved_values, key), _leaves(current_values, key)
        for leaf in sorted(old.keys() & new.keys()):
            if old[leaf] != new[leaf] and not is_under(leaf, allowed):
                changes.append(f"{leaf}: {old.get(leaf)!r} -> {new.get(leaf)!r}")
    return changes


def check_config_unchanged(cfg: ConfigSections, run_dir: Path, resume: Resume, num_processes: int) -> None:
    """ResumeError when the run's config.yaml is missing (a weights-only resume writes the current one), or when a
    compared key or the process count changed."""
    saved_path, saved_processes = run_dir / CONFIG, resume.num_processes
    copy = resume.state / CONFIG if resume.state is not None else None
    restore = (f"cp {copy} {saved_path}" if copy is not None and copy.is_file() else
               "restore it from a backup of the run folder (or start a new run with another --run_id)")
    if not saved_path.is_file() and not resume.weights_only:
        raise ResumeError(f"{saved_path} is missing: resume compares the run's config with it, and the exported and "
                          f"served run folder needs it. Restore it: {restore}")
    saved = None
    if saved_path.is_file():
        try:  # bounded, and one line when damaged (the state keeps a copy to restore it from)
            saved = read_config_values(saved_path)
        except ConfigError as error:
            raise ResumeError(f"the run's {error}. Restore it: {restore}") from None
    allowed = allowed_changes(cfg.trainer.resume_allow_changes)
    changes = config_changes(saved, cfg, allowed) if saved is not None else []
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


def fast_forward(scheduler: Any, steps: int) -> None:
    """Step the learning-rate schedule to where `steps` optimizer steps leave it (the optimizer is not stepped)."""
    for _ in range(steps):
        scheduler.step()


def use_saved_statistics(datasets: list[Any], path: Path, is_main: bool) -> None:
    """Normalise with the run's saved statistics: its checkpoints are paired with them (the file is not rewritten).

    A run without the file (weights only, e.g. from the original DiT4DiT) gets the current data's statistics.
    """
    if not path.is_file():
        log.warning("%s does not exist: the statistics of the current data are written there and used", path)
        if is_main:
            save_dataset_statistics(datasets[0].statistics(), path)
        return
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # ValueError: not JSON, or not UTF-8
        raise ResumeError(f"{path}: not readable as the run's statistics ({error}); restore it from a backup of the "
                          "run folder, or start a new run with another --run_id") from None
    if not isinstance(saved, dict):
        raise ResumeError(f"{path}: holds a {type(saved).__name__}, not the run's statistics (an object of embodiment "
                          "tags); restore it from a backup of the run folder, or start a new run with another --run_id")
    for dataset in datasets:
        for tag, current in list(dataset.normalizers.items()):
            if tag not in saved:
                raise ResumeError(f"{path} has no statistics for embodiment '{tag}' of the current data; the data "
                                  "mix changed since the run started: start a new run with another --run_id")
            if dataset.statistics()[tag] != saved[tag]:
                log.warning("the data now gives other statistics for '%s' than %s (files changed on disk); the saved "
                            "ones stay in use", tag, path)
            # The constructor a fresh start uses (key widths place sin/cos pairs); a file that names no modes or
            # widths (an older trainer's) keeps those of the current data config.
            dataset.normalizers[tag] = tuple(
                Normalizer.from_statistics(saved[tag][part],
                                           modes=saved[tag][part].get("normalization", normalizer.modes.tolist()),
                                           key_widths=saved[tag][part].get("key_widths", normalizer.key_widths))
                for part, normalizer in zip(("state", "action"), current))
