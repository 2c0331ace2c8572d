"""One pass over a dataset's parquet files: step counts, column widths and statistics, task indices.

The result is cached outside the dataset, keyed by its content and the columns scanned, so a read-only dataset
works and the pass runs once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from DiT4DiT.dataloader import checks
from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.dataloader.cache import cache_file, fingerprint, read_cached
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.reader import DatasetLayout, Slice, read_episode_columns
from DiT4DiT.dataloader.statistics import column_statistics

log = logging.getLogger(__name__)

INDEX_FORMAT = 3


@dataclass(frozen=True)
class DatasetIndex:
    lengths: dict[int, int]  # episode → rows
    widths: dict[str, int]  # numeric column → width
    statistics: dict[str, dict[str, list[float]]]  # numeric column → per-dim statistics
    episode_tasks: dict[int, list[int]]  # episode → task indices in its language column
    skipped: dict[int, str]  # episode → why it was left out (NaN/Inf, with skip_non_finite_episodes)

    @property
    def num_transitions(self) -> int:
        return sum(self.lengths.values())


def _scan(layout: DatasetLayout, numeric: list[str], language_column: str, skip_non_finite: bool) -> DatasetIndex:
    columns = numeric + [c for c in ("timestamp", language_column) if c not in numeric]
    lengths: dict[int, int] = {}
    widths: dict[str, int] = {}
    episode_tasks: dict[int, list[int]] = {}
    skipped: dict[int, str] = {}
    values: dict[str, list[np.ndarray]] = {c: [] for c in numeric}
    for episode in sorted(layout.episodes):
        table = read_episode_columns(layout, episode, columns)
        rows = len(table["timestamp"])
        path = layout.parquet_path(episode)
        checks.check_not_empty(path, episode, rows)
        for column in [*numeric, "timestamp"]:
            checks.check_column_type(path, episode, column, table[column])
        checks.check_column_type(path, episode, language_column, table[language_column], integer=True)
        checks.check_timestamps(path, episode, table["timestamp"])
        problem = next(filter(None, (checks.non_finite(path, episode, c, table[c].reshape(rows, -1))
                                     for c in numeric)), None)
        if problem and not skip_non_finite:
            raise DataError(problem)
        if problem:
            skipped[episode] = problem
            continue
        if rows != layout.episodes[episode]:
            raise DataError(f"{path}: episode {episode} has {rows} rows but "
                            f"meta/episodes.jsonl says length {layout.episodes[episode]}; make them agree")
        for column in numeric:
            array = table[column].reshape(rows, -1)
            checks.check_magnitude(path, episode, column, array)
            if column in widths and widths[column] != array.shape[1]:
                raise DataError(f"{path}: column '{column}' is {array.shape[1]} wide in "
                                f"episode {episode} but {widths[column]} wide in earlier episodes; make them agree")
            widths[column] = array.shape[1]
            values[column].append(array)
        tasks = sorted({int(v) for v in np.unique(table[language_column])})
        unknown = [t for t in tasks if t not in layout.tasks]
        if unknown:
            raise DataError(f"{path}: column '{language_column}' of episode {episode} holds "
                            f"task index(es) {unknown} missing from {layout.meta_path('tasks.jsonl')}; add them there")
        lengths[episode], episode_tasks[episode] = rows, tasks
    if not lengths:
        raise DataError(f"{layout.root}: every episode holds NaN/Inf values, none is left to train on")
    statistics = {c: column_statistics(np.concatenate(values[c])) for c in numeric}
    return DatasetIndex(lengths, widths, statistics, episode_tasks, skipped)


def load_index(layout: DatasetLayout, numeric: list[str], language_column: str, cache_dir: Path,
               skip_non_finite: bool = False) -> DatasetIndex:
    """The dataset's index, from the cache when its content and the scanned columns are unchanged."""
    settings = {"format": INDEX_FORMAT, "numeric": sorted(numeric), "language": language_column,
                "skip_non_finite": skip_non_finite}
    path = cache_file(cache_dir, layout, "index", fingerprint(layout, settings))
    cached = read_cached(path)
    if cached is not None:
        return DatasetIndex(
            lengths={int(k): v for k, v in cached["lengths"].items()},
            widths=cached["widths"],
            statistics=cached["statistics"],
            episode_tasks={int(k): v for k, v in cached["episode_tasks"].items()},
            skipped={int(k): v for k, v in cached["skipped"].items()},
        )
    # Rank-specific: one process per node scans (the others read its cache), and which one matters.
    log.info("scanning %s (%d episodes) for statistics and steps", layout.root, len(layout.episodes),
             extra={"rank_specific": True})
    index = _scan(layout, sorted(numeric), language_column, skip_non_finite)
    write_json_atomic(path, {"lengths": index.lengths, "widths": index.widths, "statistics": index.statistics,
                             "episode_tasks": index.episode_tasks, "skipped": index.skipped})
    return index


def check_widths(layout: DatasetLayout, index: DatasetIndex, slices: dict[str, Slice]) -> None:
    """Every modality.json range must lie inside its parquet column, whose width info.json must declare right."""
    for key, where in slices.items():
        width = index.widths[where.column]
        declared = layout.info.get("features", {}).get(where.column, {}).get("shape")
        if declared and int(np.prod(declared)) != width:
            raise DataError(f"{layout.root}: column '{where.column}' is {width} wide in the parquet files but "
                            f"meta/info.json features.{where.column}.shape says {declared}; make them agree")
        if where.end > width:
            raise DataError(f"{layout.meta_path('modality.json')}: '{key}' reads [{where.start}:{where.end}] of "
                            f"column '{where.column}', which is only {width} wide; fix start/end in modality.json")
