"""`baseframework` at the original's import path, and run folders both ways.

`baseframework.from_pretrained(checkpoint)` builds the framework a run folder's config names and loads the
checkpoint into it: the original's run folders (every weight; a config.yaml that may lack keys the original only
read in its DataLoader workers, which the checkpoint's shapes then supply) as well as ours (frozen modules left
out, reloaded from `framework.cosmos25.base_model`). The model comes back on the CPU with `norm_stats` attached.

A run folder made on another machine records its base model as a path there: `base_model=` (the server's and
open-loop evaluation's `--base_model`, or DIT4DIT_BASE_MODEL) points it at the local snapshot.

What a run folder records is DiT4DiT/config/recorded.py's (`recorded_config`, imported here for the callers that
know it by this module).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from DiT4DiT.config.recorded import DIT_CFG, read_config_values, recorded_config  # noqa: F401 (recorded_config: see above)
from DiT4DiT.config.schema import ConfigError, load_config
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.config.typed import value_at
from DiT4DiT.config.validate import action_chunk
from DiT4DiT.dataloader.config_checks import check_data_configs
from DiT4DiT.model.framework import build_framework, share_tools
from DiT4DiT.model.freezing import left_out_of_checkpoints
from DiT4DiT.model.modules.weights import load_trained_weights
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

log = logging.getLogger(__name__)

BASE_MODEL_KEY = "framework.cosmos25.base_model"
# The local Cosmos snapshot for run folders whose recorded one is not here (the default of --base_model).
BASE_MODEL_ENV = "DIT4DIT_BASE_MODEL"
# Keys a checkpoint's weight shapes fix: (tensor, dim). The original's config.yaml lacks max_state_dim and
# max_action_dim when it trained with DataLoader workers (only keys read in the main process are recorded).
SHAPE_KEYS = {
    "framework.action_model.action_dim": ("action_model.action_decoder.layer2.weight", 0),
    "datasets.vla_data.max_action_dim": ("action_model.action_decoder.layer2.weight", 0),
    "framework.action_model.state_dim": ("action_model.state_encoder.layer1.weight", 1),
    "datasets.vla_data.max_state_dim": ("action_model.state_encoder.layer1.weight", 1),
    "framework.action_model.hidden_size": ("action_model.action_decoder.layer1.weight", 0),
    "framework.action_model.max_seq_len": ("action_model.position_embedding.weight", 0),
    f"{DIT_CFG}.output_dim": ("action_model.model.proj_out_2.weight", 0),
    f"{DIT_CFG}.cross_attention_dim": ("action_model.model.transformer_blocks.0.attn1.to_k.weight", 1),
}


class RunFolderError(ConfigError):
    """A run folder whose config.yaml and checkpoint disagree, or that lacks a key nothing else supplies."""


def _shapes(checkpoint: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of a weights file, memory-mapped: a full 2B checkpoint is not read for them. RunFolderError
    for a file that is not a state dict torch.save wrote (empty, truncated, another file, another object)."""
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # torch and pickle raise many unrelated types for files that are not checkpoints
        reason = " ".join(str(error).split())[:200]
        raise RunFolderError(f"{checkpoint}: not a checkpoint torch can read ({type(error).__name__}: {reason}); "
                             "use the .pt file the run saved") from None
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise RunFolderError(f"{checkpoint}: holds a {type(state).__name__}, not a state dict of tensors; use the .pt "
                             "file the run saved")
    return {name: tuple(tensor.shape) for name, tensor in state.items()}


def base_model_override(config_path: Path, raw: dict[str, Any], base_model: str | Path | None) -> list[str]:
    """The dotlist value putting `base_model` in place of the recorded snapshot; none when not given. Without
    it, a recorded snapshot that does not exist here is a RunFolderError naming the path, the key and the fix."""
    recorded = value_at(raw, BASE_MODEL_KEY, None)
    if base_model:
        if str(base_model) != str(recorded):
            log.info("%s: %s=%s replaced by %s (--base_model / %s)", config_path, BASE_MODEL_KEY, recorded, base_model,
                     BASE_MODEL_ENV)
        return [f"{BASE_MODEL_KEY}={base_model}"]
    if recorded is not None and not Path(str(recorded)).exists():
        raise RunFolderError(f"{config_path}: {BASE_MODEL_KEY} is {recorded}, which does not exist here (the run was "
                             "made on another machine?); pass --base_model /path/to/Cosmos-Predict2.5-2B (or set "
                             f"{BASE_MODEL_ENV}) to use the local snapshot")
    return []


def run_config_overrides(config_path: Path, checkpoint: Path, raw: dict[str, Any]) -> list[str]:
    """Dotlist values for the keys config.yaml (read as `raw`) lacks and the checkpoint's shapes fix;
    RunFolderError where the two disagree. Logs one line naming what was inferred."""
    shapes = _shapes(checkpoint)
    inferred, contradictions = {}, []
    for key, (tensor, dim) in SHAPE_KEYS.items():
        if tensor not in shapes:
            continue
        value = shapes[tensor][dim]
        recorded = value_at(raw, key, None)
        if recorded is None:
            inferred[key] = value
        elif recorded != value:
            contradictions.append(f"{config_path} says {key}={recorded} but {checkpoint} has {tensor} of shape "
                                  f"{list(shapes[tensor])} ({key}={value})")
    if contradictions:
        raise RunFolderError("; ".join(contradictions) + ": the checkpoint belongs to another run, or the config was "
                             "edited; put the checkpoint beside its own config.yaml")
    if inferred:
        log.info("%s lacks %s; inferred from %s: %s", config_path, ", ".join(inferred), checkpoint.name,
                 ", ".join(f"{k}={v}" for k, v in inferred.items()))
    return [f"{key}={value}" for key, value in inferred.items()]


def load_run_config(checkpoint: str | Path, base_model: str | Path | None = None,
                    overrides: list[str] | tuple[str, ...] = ()) -> ConfigSections:
    """The config of the run `checkpoint` belongs to (`<run_dir>/config.yaml`), completed from its shapes, with
    `base_model` (default: $DIT4DIT_BASE_MODEL) as its snapshot when given and then `overrides` (dotlist); that
    base model folder (frozen modules reload from it) must be complete."""
    checkpoint = Path(checkpoint)
    share_tools.read_mode_config(checkpoint)  # both run files present, or a clear error
    config_path = checkpoint.parents[1] / "config.yaml"
    raw = read_config_values(config_path)
    base = base_model_override(config_path, raw, base_model or os.environ.get(BASE_MODEL_ENV))
    config = load_config(config_path, [*run_config_overrides(config_path, checkpoint, raw), *base, *overrides])
    check_data_configs(config.datasets.vla_data, action_chunk(config))
    problems = pipeline_folder_problems(config.framework.cosmos25.base_model)
    if problems:
        raise RunFolderError(f"{config_path}: " + " | ".join(problems))
    return config


class baseframework:  # noqa: N801 (the original's class name, imported by its clients)
    """Loading and action-statistics helpers shared by the frameworks."""

    @classmethod
    def from_pretrained(cls, pretrained_checkpoint: str | Path, base_model: str | Path | None = None,
                        **ignored_kwargs) -> nn.Module:
        """The model of `<run_dir>/config.yaml` with `pretrained_checkpoint` loaded (a .pt two levels below).

        The config says which modules its checkpoints leave out (they reload from the base snapshot: `base_model`,
        default $DIT4DIT_BASE_MODEL, when the recorded one is elsewhere); every other weight must be in the file.
        """
        checkpoint = Path(pretrained_checkpoint)
        config = load_run_config(checkpoint, base_model)
        model = build_framework(config)  # a ConfigError names the registered frameworks if it is not one
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        load_trained_weights(model, state, checkpoint, may_be_missing=left_out_of_checkpoints(config.trainer))
        model.norm_stats = json.loads((checkpoint.parents[1] / "dataset_statistics.json").read_text())
        return model

    @classmethod
    def get_action_stats(cls, unnorm_key: str | None = None, norm_stats: dict | None = None) -> dict:
        """`norm_stats[tag]["action"]`; pass the model's `norm_stats` (the original reads a class attribute)."""
        return share_tools.get_action_stats(unnorm_key, norm_stats if norm_stats is not None else
                                            getattr(cls, "norm_stats", None))

    @staticmethod
    def unnormalize_actions(normalized_actions: np.ndarray, action_norm_stats: dict) -> np.ndarray:
        return share_tools.unnormalize_actions(normalized_actions, action_norm_stats)

