"""Run-folder helpers at the original's import path, for its deployment and evaluation code.

`read_mode_config` reads a checkpoint's run folder (config and dataset statistics); `get_action_stats` picks the
action statistics of one dataset tag; `unnormalize_actions` maps normalised actions back the way the original's
base framework does. Same names, arguments and results as the original's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.recorded import read_config_values


class RunFileMissing(ConfigError, FileNotFoundError):
    """A checkpoint, or its run folder's config or statistics, that is not there."""


def _run_files(pretrained_checkpoint: str | Path, config_name: str) -> tuple[Path, Path]:
    checkpoint = Path(pretrained_checkpoint)
    if not checkpoint.is_file():
        raise RunFileMissing(f"Pretrained checkpoint `{checkpoint}` does not exist; give an existing .pt file")
    if checkpoint.suffix != ".pt":
        raise ConfigError(f"{checkpoint}: a checkpoint is a .pt file two levels below its run folder "
                          "(<run_dir>/checkpoints/steps_N_pytorch_model.pt or <run_dir>/final_model/pytorch_model.pt)")
    run_dir = checkpoint.parents[1]
    config, statistics = run_dir / config_name, run_dir / "dataset_statistics.json"
    for path in (config, statistics):
        if not path.is_file():
            raise RunFileMissing(f"Missing `{path.name}` for run_dir {run_dir} (the folder two levels above "
                                 f"{checkpoint.name}); a run folder holds {config_name} and dataset_statistics.json")
    return config, statistics


def read_mode_config(pretrained_checkpoint: str | Path) -> tuple[dict, dict]:
    """(config as a plain dict, dataset statistics) of the run a checkpoint belongs to (`<run_dir>/config.yaml`)."""
    config, statistics = _run_files(pretrained_checkpoint, "config.yaml")
    return read_config_values(config), json.loads(statistics.read_text())


def check_unnorm_key(norm_stats: dict, unnorm_key: str | None, source: str = "the dataset statistics") -> str:
    """The statistics tag to un-normalise with: the only one, or the one asked for (which must exist); the
    deployment helpers and the policy server both choose with it."""
    if unnorm_key is None:
        if len(norm_stats) != 1:
            raise ConfigError(f"{source}: the model was trained on more than one dataset tag; pass unnorm_key, one "
                              f"of {sorted(norm_stats)} (the server's --unnorm_key)")
        return next(iter(norm_stats))
    if unnorm_key not in norm_stats:
        raise ConfigError(f"unnorm_key {unnorm_key!r} is not in {source}; choose another: it holds {sorted(norm_stats)}")
    return unnorm_key


def get_action_stats(unnorm_key: str | None = None, norm_stats: dict | None = None) -> dict:
    """The `action` statistics (min, max, q01, q99, mask, ...) of one dataset tag."""
    if norm_stats is None:
        raise ValueError("get_action_stats needs norm_stats (a model's .norm_stats or a dataset_statistics.json)")
    return norm_stats[check_unnorm_key(norm_stats, unnorm_key)]["action"]


def unnormalize_actions(normalized_actions: np.ndarray, action_norm_stats: dict) -> np.ndarray:
    """As the original's base framework (written for LIBERO's 7-dim actions): clip to [-1, 1], round column 6
    (the gripper) to 0/1 at 0.5, and map the dims the mask keeps with q01/q99: (a + 1) / 2 * (q99 - q01) + q01;
    dims the mask leaves out keep their (clipped) value."""
    low, high = np.asarray(action_norm_stats["q01"]), np.asarray(action_norm_stats["q99"])
    mask = np.asarray(action_norm_stats.get("mask", np.ones_like(low, dtype=bool)), dtype=bool)
    actions = np.clip(np.asarray(normalized_actions, dtype=np.float64), -1.0, 1.0)
    actions[:, 6] = np.where(actions[:, 6] < 0.5, 0.0, 1.0)
    return np.where(mask, 0.5 * (actions + 1.0) * (high - low) + low, actions)
