"""meta/modality.json for datasets that lerobot wrote (it never writes one): derived from meta/info.json features
and a data config, kept in the cache next to the dataset's index (never in the dataset folder); `auto` picks
the one data config whose keys and cameras fit the features."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.dataloader.cache import cache_file, fingerprint, read_cached
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS, DataConfig
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.meta_schema import CAMERA_DTYPES
from DiT4DiT.dataloader.mixtures import resolve_data_mix
from DiT4DiT.dataloader.reader import DEFAULT_ORIGINAL_KEY, DatasetLayout

log = logging.getLogger(__name__)

AUTO = "auto"
CAMERA_PREFIX = "observation.images."
TASK_COLUMN = "task_index"


def _ranges(group: str, column: str, layout, config: DataConfig, features: dict, where: Path) -> dict:
    expected = sum(w for _, w in layout)
    described = ", ".join(f"{k} {w}" for k, w in layout)
    if column not in features:
        raise DataError(f"{where}: data config '{config.name}' reads its {group} ({described}) from feature "
                        f"'{column}', which this dataset does not have; pick the data config of this robot or write "
                        "meta/modality.json (python -m DiT4DiT.tools.modality DIR --data_config NAME --out FILE)")
    shape = features[column].get("shape")
    if int(np.prod(shape)) != expected:
        raise DataError(f"{where}: feature '{column}' has shape {shape}, but data config '{config.name}' expects "
                        f"{expected} values ({described}); pick the data config of this robot or write "
                        "meta/modality.json (python -m DiT4DiT.tools.modality DIR --data_config NAME --out FILE)")
    ranges, start = {}, 0
    for key, width in layout:
        ranges[key] = {"start": start, "end": start + width}
        start += width
    return ranges


def derive_modality(info: dict, config: DataConfig, where: Path) -> dict:
    """The modality.json that reads this dataset through `config`: state and action keys sliced from
    observation.state / action in the robot's stored order, cameras observation.images.<name>, the task text
    from task_index. DataError naming the feature, its shape and the expectation when they do not fit."""
    features = info.get("features", {})
    cameras = sorted(k for k, f in features.items() if f.get("dtype") in CAMERA_DTYPES)
    video = {}
    for key in config.video_keys:
        name = key.split(".", 1)[1]
        column = CAMERA_PREFIX + name
        if column not in cameras:
            raise DataError(f"{where}: data config '{config.name}' needs camera '{column}', which this dataset does "
                            f"not have (its cameras: {cameras}); pick the data config of this robot or write "
                            "meta/modality.json (python -m DiT4DiT.tools.modality DIR --data_config NAME --out FILE)")
        video[name] = {"original_key": column}
    if TASK_COLUMN not in features:
        raise DataError(f"{where}: no '{TASK_COLUMN}' feature, so no task text per frame; LeRobot datasets have one")
    return {
        "state": _ranges("state", DEFAULT_ORIGINAL_KEY["state"], config.state_layout, config, features, where),
        "action": _ranges("action", DEFAULT_ORIGINAL_KEY["action"], config.action_layout, config, features, where),
        "video": video,
        "annotation": {config.language_key.split(".", 1)[1]: {"original_key": TASK_COLUMN}},
    }


def fitting_configs(layout: DatasetLayout) -> list[str]:
    """The data configs a dataset can be read through: its own modality.json's keys, or its info.json features."""
    fits = []
    for name, config in DATA_CONFIGS.items():
        try:
            if layout.modality is None:
                derive_modality(layout.info, config, layout.meta_path("info.json"))
            elif not all(sub in (layout.modality.get(group) or {}) for group, _, sub in
                         (k.partition(".") for k in (*config.state_keys, *config.action_keys, *config.video_keys,
                                                     config.language_key))):
                continue
        except DataError:
            continue
        fits.append(name)
    return fits


def choose_config(layout: DatasetLayout, wanted: str) -> DataConfig:
    """The data config named `wanted`, or with `auto` the one that fits the dataset (else an error listing them)."""
    if wanted != AUTO:
        return DATA_CONFIGS[wanted]
    fits = fitting_configs(layout)
    if len(fits) == 1:
        return DATA_CONFIGS[fits[0]]
    found = f"these fit: {', '.join(fits)}" if fits else "none fits its features"
    raise DataError(f"{layout.root}: datasets.vla_data.data_config=auto needs exactly one data config that fits this "
                    f"dataset, but {found}; set datasets.vla_data.data_config (launcher: --data_config=NAME)")


def attach_modality(layout: DatasetLayout, config: DataConfig, cache_dir: Path) -> str:
    """Give `layout` its modality (meta/modality.json when there, else derived and cached); says where it came from."""
    if layout.modality is not None:
        return "meta/modality.json"
    derived = derive_modality(layout.info, config, layout.meta_path("info.json"))
    path = cache_file(cache_dir, layout, "modality", fingerprint(layout, {"data_config": config.name}))
    if read_cached(path) != derived:
        write_json_atomic(path, derived)
        log.info("%s: no meta/modality.json; derived from meta/info.json for data config %s and stored in %s: %s",
                 layout.root, config.name, path, json.dumps(derived))
    layout.modality = derived
    return f"derived for {config.name} ({path})"


def entry_config(entry, root: str | Path | None = None) -> DataConfig:
    """The data config of a mixture entry; `auto` is resolved against the dataset's features."""
    if entry.data_config != AUTO:
        return DATA_CONFIGS[entry.data_config]
    return choose_config(DatasetLayout(Path(root or "/") / entry.dataset), AUTO)


def mixture_configs(data_mix: str, data_config: str = AUTO, root: str | Path | None = None) -> list[DataConfig]:
    """The data config of each entry of `datasets.vla_data.data_mix` (a named mixture's entries under `root`)."""
    return [entry_config(entry, root) for entry in resolve_data_mix(data_mix, data_config)]
