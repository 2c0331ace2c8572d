"""Per-column statistics, their merge across datasets of one embodiment tag, and dataset_statistics.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.dataloader.checks import check_statistics_finite
from DiT4DiT.dataloader.errors import DataError

STAT_NAMES = ("mean", "std", "max", "min", "q01", "q99")


def column_statistics(values: np.ndarray) -> dict[str, list[float]]:
    """mean/std/max/min/q01/q99 of each dim of a (rows, dims) array."""
    values = np.asarray(values, dtype=np.float64)
    return {
        "mean": values.mean(axis=0).tolist(),
        "std": values.std(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "min": values.min(axis=0).tolist(),
        "q01": np.quantile(values, 0.01, axis=0).tolist(),
        "q99": np.quantile(values, 0.99, axis=0).tolist(),
    }


def slice_statistics(stats: dict[str, list[float]], start: int, end: int) -> dict[str, np.ndarray]:
    return {name: np.asarray(stats[name][start:end], dtype=np.float64) for name in STAT_NAMES}


def concat_statistics(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([p[name] for p in parts]) for name in STAT_NAMES}


def merge_statistics(parts: Sequence[tuple[dict[str, np.ndarray], int]]) -> dict[str, np.ndarray]:
    """Combine statistics of several datasets, each with its row count.

    Mean weighted by rows, std from the weighted second moments, extremes element-wise, and the quantiles
    widened (smallest q01, largest q99) because exact pooled quantiles would need every row again.
    """
    counts = np.asarray([n for _, n in parts], dtype=np.float64)
    weights = counts / counts.sum()
    means = np.stack([s["mean"] for s, _ in parts])
    second = np.stack([s["std"] ** 2 + s["mean"] ** 2 for s, _ in parts])
    mean = weights @ means
    return {
        "mean": mean,
        "std": np.sqrt(np.maximum(weights @ second - mean**2, 0.0)),
        "max": np.max([s["max"] for s, _ in parts], axis=0),
        "min": np.min([s["min"] for s, _ in parts], axis=0),
        "q01": np.min([s["q01"] for s, _ in parts], axis=0),
        "q99": np.max([s["q99"] for s, _ in parts], axis=0),
    }


def statistics_section(stats: dict[str, np.ndarray], modes: Sequence[str], mask: Sequence[bool] | None = None,
                       key_widths: Sequence[int] | None = None) -> dict:
    """One `state` / `action` entry of dataset_statistics.json (plain lists; `mask` only for actions).

    The original's keys first (raw per-dim statistics, `mask`), then ours: `normalization` (mode per raw dim)
    and `key_widths` (width of each data-config key, which places sin/cos pairs), which the original ignores.
    """
    section = {name: np.asarray(stats[name], dtype=np.float64).tolist() for name in STAT_NAMES}
    if mask is not None:
        section["mask"] = [bool(m) for m in mask]
    section["normalization"] = list(modes)
    if key_widths is not None:
        section["key_widths"] = [int(w) for w in key_widths]
    return section


def save_dataset_statistics(stats: dict, path: str | Path) -> None:
    """Write dataset_statistics.json atomically (temporary file + os.replace); never with a NaN or Inf in it."""
    check_statistics_finite(stats, Path(path))
    write_json_atomic(Path(path), stats)


def stored_statistics(stats_path: Path, widths: dict[str, int]) -> dict[str, dict[str, list[float]]]:
    """The dataset's own meta/stats.json for these columns (datasets.vla_data.statistics=dataset), checked to
    hold every statistic we normalise with, at the columns' widths."""
    if not stats_path.is_file():
        raise DataError(f"{stats_path}: missing, but datasets.vla_data.statistics=dataset reads it; use "
                        "datasets.vla_data.statistics=computed")
    try:
        stored = json.loads(stats_path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{stats_path}: not valid JSON ({exc}); repair it or use datasets.vla_data.statistics=computed") from exc
    result = {}
    for column, width in widths.items():
        entry = stored.get(column) if isinstance(stored, dict) else None
        missing = [n for n in STAT_NAMES if not isinstance(entry, dict) or n not in entry]
        if missing or not isinstance(entry, dict):
            raise DataError(f"{stats_path}: '{column}' lacks {missing} (lerobot >= 0.4 writes q01/q99); use "
                            "datasets.vla_data.statistics=computed")
        values = {n: np.asarray(entry[n], dtype=np.float64).reshape(-1) for n in STAT_NAMES}
        wrong = [n for n, v in values.items() if len(v) != width]
        if wrong:
            raise DataError(f"{stats_path}: '{column}' {wrong[0]} has {len(values[wrong[0]])} values for a column "
                            f"{width} wide; regenerate the statistics or use datasets.vla_data.statistics=computed")
        result[column] = {n: v.tolist() for n, v in values.items()}
    return result
