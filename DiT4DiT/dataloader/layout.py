"""Which folders are LeRobot datasets: the one rule the trainer, the launcher's preflight, the doctor and the
tools share (standard library only, so the launcher checks a data root before torch loads)."""

from __future__ import annotations

from pathlib import Path

DATASET_MARK = "meta/info.json"  # every LeRobot dataset (v2.x and v3.0) has it


def is_dataset(folder: Path) -> bool:
    return (folder / DATASET_MARK).is_file()


def dataset_folders(root: Path) -> list[Path]:
    """LeRobot dataset folders one or two levels below `root`."""
    return sorted(p.parent.parent for p in [*root.glob(f"*/{DATASET_MARK}"), *root.glob(f"*/*/{DATASET_MARK}")])
