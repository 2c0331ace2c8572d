"""Data pipeline: GR00T-flavoured LeRobot v2.x datasets → mixture samples in the original's example-dict format."""

import importlib

# Loaded on first use, so the torch-free parts (data configs, transforms, the tiny-dataset writer) import in the
# simulator environments, which have no torch.
_EXPORTS = {"build_vla_dataset": "build", "build_vla_datasets": "build", "MixtureDataset": "dataset",
            "collate_fn": "dataset", "DataError": "errors", "save_dataset_statistics": "statistics",
            "Normalizer": "transforms"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
