"""The data keys of a config checked against the data registry (data configs, named mixtures) and the data
folders a training launch reads, without reading any dataset.

Called where a config is loaded for training (the trainer's and the launcher's checks, the doctor), not by
config/: the config package sits below the data package and does not know its registry.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import DatasetsVlaDataSection
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.image_augmentation import augmentation_of
from DiT4DiT.dataloader.mixtures import DATASET_NAMED_MIXTURES, is_path, resolve_data_mix


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def check_data_configs(data: DatasetsVlaDataSection, chunk: int | None) -> None:
    """The data configs a run names exist and fit the action chunk of `chunk` steps (None: no action head);
    named mixtures only, so without reading any dataset."""
    known = ["auto", *DATA_CONFIGS]
    _require(data.data_config in known, f"datasets.vla_data.data_config={data.data_config!r} is not a data config; "
             f"use one of {', '.join(difflib.get_close_matches(data.data_config, known, len(known), 0.0))}")
    names = [data.data_config]
    if not is_path(data.data_mix) and data.data_mix in DATASET_NAMED_MIXTURES:
        names = [e.data_config for e in DATASET_NAMED_MIXTURES[data.data_mix]]
        for name in names:
            _require(name in DATA_CONFIGS, f"mixture '{data.data_mix}' names data config '{name}', which does not "
                     f"exist; known: {sorted(DATA_CONFIGS)}")
    for name in dict.fromkeys(n for n in names if n in DATA_CONFIGS):
        config = DATA_CONFIGS[name]
        for group, layout, limit in (("state", config.state_layout, data.max_state_dim),
                                     ("action", config.action_layout, data.max_action_dim)):
            # sin/cos keys take two dims each (a dataset's own modality.json is checked again when it is read)
            width = sum(w * (2 if config.normalization[f"{group}.{k}"] == "sincos" else 1) for k, w in layout)
            _require(width <= limit, f"data config '{name}' gives {width}-dim {group}s, more than "
                     f"datasets.vla_data.max_{group}_dim={limit}; set it to at least {width}")
        horizon = config.action_horizon
        _require(chunk is None or horizon is None or horizon == chunk,
                 f"data config '{name}' (datasets.vla_data.data_mix={data.data_mix}) fixes the action chunk at "
                 f"{horizon} steps, but framework.action_model.future_action_window_size + 1 = {chunk}; set "
                 f"framework.action_model.future_action_window_size={(horizon or 1) - 1} or use a data config whose "
                 "chunk follows the window (e.g. robotwin)")


def check_latent_cache(data: DatasetsVlaDataSection) -> None:
    """framework.cosmos25.latent_cache with augmented frames is refused: a stored posterior is one draw, the same
    every epoch. Named data configs here; `auto` ones when the datasets are read (MixtureDataset.use_latents)."""
    names = [data.data_config]
    if not is_path(data.data_mix) and data.data_mix in DATASET_NAMED_MIXTURES:
        names = [e.data_config for e in DATASET_NAMED_MIXTURES[data.data_mix]]
    configs = [DATA_CONFIGS[n] for n in dict.fromkeys(names) if n in DATA_CONFIGS]
    augmented = [c.name for c in configs if augmentation_of(c.augmentation, data.image_augmentation) is not None]
    if data.image_augmentation.apply == "all" or augmented:
        why = (f"data config '{augmented[0]}' augments its frames (as the original's does)"
               if data.image_augmentation.apply == "data_config" else
               "datasets.vla_data.image_augmentation.apply=all augments every dataset's frames")
        raise ConfigError(f"framework.cosmos25.latent_cache: {why}, and a stored posterior would be the same draw every "
                          "epoch; set datasets.vla_data.image_augmentation.apply=none to train without augmentation, or "
                          "framework.cosmos25.latent_cache=false")


def check_folder_path(key: str, folder: Path) -> None:
    """`folder` is a folder or can become one: neither it nor any parent is a file."""
    for path in (folder, *folder.parents):
        if path.exists():
            _require(path.is_dir(), f"{key}: '{path}' is a file, not a folder"
                     + (f" (in the path '{folder}')" if path != folder else "") + "; point it at a folder")
            return


def check_data_folders(data: DatasetsVlaDataSection) -> None:
    """The data_mix paths (or data_root_dir) exist and the cache folder can be one."""
    if is_path(data.data_mix):
        resolve_data_mix(data.data_mix, data.data_config)  # ConfigError naming a missing path or a bad mixture file
    else:
        if data.data_root_dir is None:
            raise ConfigError(f"datasets.vla_data.data_root_dir is not set (data_mix={data.data_mix} names folders "
                              "under it): pass --datasets.vla_data.data_root_dir DIR, or give data_mix as a path")
        _require(Path(data.data_root_dir).is_dir(), f"datasets.vla_data.data_root_dir: folder '{data.data_root_dir}' does not exist")
    if data.cache_dir is not None:
        check_folder_path("datasets.vla_data.cache_dir", Path(data.cache_dir).expanduser())
