"""Data pipeline: LeRobot datasets (v2.x / v3.0, videos or images) → mixture samples in the original's example-dict format.

Names are imported on first use, so the config rules (and the simulator environments, which have no torch) can
read the mixtures and data configs and use the writer without torch.
"""

import importlib
from typing import Any

_HOMES = {
    "build_vla_dataset": "build", "build_vla_datasets": "build", "MixtureDataset": "dataset", "collate_fn": "dataset",
    "DataError": "errors", "save_dataset_statistics": "statistics", "Normalizer": "transforms",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
