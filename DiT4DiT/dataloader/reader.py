"""Meta files and per-episode parquet tables of one GR00T-flavoured LeRobot v2.x dataset folder (read-only)."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from DiT4DiT.dataloader.errors import DataError

META_FILES = ("info.json", "episodes.jsonl", "tasks.jsonl", "modality.json")
# GR00T's modality.json schema: where a state/action key lives when `original_key` is absent.
DEFAULT_ORIGINAL_KEY = {"state": "observation.state", "action": "action"}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc}); repair or regenerate the file") from exc


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}, line {number}: not valid JSON ({exc}); repair or regenerate the file") from exc
    return rows


@dataclass(frozen=True)
class Slice:
    """Where one modality key (e.g. `state.left_arm`) lives: a parquet column and a [start:end) range in it."""

    column: str
    start: int
    end: int
    absolute: bool

    @property
    def width(self) -> int:
        return self.end - self.start


class DatasetLayout:
    """The meta files of one dataset folder and the paths they imply; nothing is ever written here."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        missing = [name for name in META_FILES if not (self.root / "meta" / name).is_file()]
        if missing:
            raise DataError(
                f"{self.root}: missing meta/{', meta/'.join(missing)}. A GR00T-flavoured LeRobot v2.x dataset needs "
                f"meta/{', meta/'.join(META_FILES)}; convert the dataset to that layout (or fix data_root_dir / data_mix)"
            )
        meta = self.root / "meta"
        self.info: dict = _read_json(meta / "info.json")
        self.modality: dict = _read_json(meta / "modality.json")
        for key in ("data_path", "chunks_size"):
            if key not in self.info:
                raise DataError(f"{meta / 'info.json'}: key '{key}' is missing; LeRobot v2.x info.json files define it")
        self.episodes: dict[int, int] = {}
        for row in _read_jsonl(meta / "episodes.jsonl"):
            if "episode_index" not in row or "length" not in row:
                raise DataError(f"{meta / 'episodes.jsonl'}: line {row} lacks 'episode_index' or 'length'")
            self.episodes[int(row["episode_index"])] = int(row["length"])
        if not self.episodes:
            raise DataError(f"{meta / 'episodes.jsonl'}: no episodes listed")
        self.tasks: dict[int, str] = {}
        for row in _read_jsonl(meta / "tasks.jsonl"):
            if "task_index" not in row or "task" not in row:
                raise DataError(f"{meta / 'tasks.jsonl'}: line {row} lacks 'task_index' or 'task'")
            self.tasks[int(row["task_index"])] = str(row["task"])

    @property
    def name(self) -> str:
        return self.root.name

    def meta_path(self, name: str) -> Path:
        return self.root / "meta" / name

    def episode_chunk(self, episode: int) -> int:
        return episode // int(self.info["chunks_size"])

    def parquet_path(self, episode: int) -> Path:
        relative = self.info["data_path"].format(episode_chunk=self.episode_chunk(episode), episode_index=episode)
        return self.root / relative

    def video_path(self, episode: int, video_key: str) -> Path:
        template = self.info.get("video_path")
        if not template:
            raise DataError(f"{self.meta_path('info.json')}: 'video_path' is empty, but camera '{video_key}' is needed; "
                            "this loader reads videos stored as mp4 files")
        relative = template.format(episode_chunk=self.episode_chunk(episode), episode_index=episode, video_key=video_key)
        return self.root / relative

    def _modality_entry(self, key: str, config_name: str) -> tuple[str, str, dict]:
        group, _, sub = key.partition(".")
        entries = self.modality.get(group)
        if not isinstance(entries, dict) or sub not in entries:
            known = sorted(entries) if isinstance(entries, dict) else []
            raise DataError(
                f"{self.meta_path('modality.json')}: data config '{config_name}' needs '{group}.{sub}', which is not "
                f"there (the '{group}' section has {known}); add it to modality.json or pick a data config that "
                f"matches this dataset"
            )
        return group, sub, entries[sub]

    def slice_of(self, key: str, config_name: str) -> Slice:
        """The parquet column and range of a `state.*` / `action.*` key, honouring `original_key`."""
        group, sub, entry = self._modality_entry(key, config_name)
        if "start" not in entry or "end" not in entry:
            raise DataError(f"{self.meta_path('modality.json')}: '{group}.{sub}' needs 'start' and 'end'")
        return Slice(
            column=entry.get("original_key", DEFAULT_ORIGINAL_KEY[group]),
            start=int(entry["start"]),
            end=int(entry["end"]),
            absolute=bool(entry.get("absolute", True)),
        )

    def video_key_of(self, key: str, config_name: str) -> str:
        """The `observation.images.*` key (video_key of the video_path template) of a `video.*` key."""
        _, sub, entry = self._modality_entry(key, config_name)
        return entry.get("original_key", f"observation.images.{sub}")

    def language_column_of(self, key: str, config_name: str) -> str:
        """The parquet column holding task indices for an `annotation.*` key (GR00T default: the key itself)."""
        _, _, entry = self._modality_entry(key, config_name)
        return entry.get("original_key", key)

    def video_fps(self, video_key: str) -> float:
        feature = self.info.get("features", {}).get(video_key, {})
        fps = (feature.get("video_info") or {}).get("video.fps") or (feature.get("info") or {}).get("video.fps")
        fps = fps or self.info.get("fps")
        if not fps:
            raise DataError(f"{self.meta_path('info.json')}: no fps for '{video_key}' (features.{video_key}.video_info"
                            "['video.fps'] or top-level 'fps'); add it")
        return float(fps)


def _column_array(table: pa.Table, column: str, path: Path) -> np.ndarray:
    data = table.column(column).combine_chunks()
    if pa.types.is_list(data.type) or pa.types.is_fixed_size_list(data.type) or pa.types.is_large_list(data.type):
        lengths = np.unique(pa.compute.list_value_length(data).to_numpy(zero_copy_only=False))
        if len(lengths) > 1:
            raise DataError(f"{path}: column '{column}' has rows of different widths {lengths.tolist()}; "
                            "every row must have the same width")
        width = int(lengths[0]) if len(lengths) else 0
        return data.flatten().to_numpy(zero_copy_only=False).reshape(len(data), width)
    return data.to_numpy(zero_copy_only=False)


def read_episode_columns(layout: DatasetLayout, episode: int, columns: list[str]) -> dict[str, np.ndarray]:
    """Named columns of one episode's parquet file, list columns as (rows, width) arrays."""
    path = layout.parquet_path(episode)
    if not path.is_file():
        raise DataError(f"{layout.root}: episode {episode} has no parquet file {path} (from info.json data_path); "
                        "restore it or drop the episode from meta/episodes.jsonl")
    try:
        schema_names = pq.read_schema(path).names
        missing = [c for c in columns if c not in schema_names]
        if missing:
            raise DataError(f"{path}: episode {episode} lacks column(s) {missing} (has {schema_names}); "
                            "fix meta/modality.json original_key entries or the parquet file")
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{path}: episode {episode} parquet cannot be read ({exc}); regenerate the file") from exc
    return {c: _column_array(table, c, path) for c in columns}


class EpisodeCache:
    """Per-process LRU of decoded parquet columns: episodes are small, and a sample reads one episode."""

    def __init__(self, layout: DatasetLayout, columns: list[str], capacity: int = 128):
        self.layout, self.columns, self.capacity = layout, columns, capacity
        self._tables: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()

    def get(self, episode: int) -> dict[str, np.ndarray]:
        if episode in self._tables:
            self._tables.move_to_end(episode)
            return self._tables[episode]
        table = read_episode_columns(self.layout, episode, self.columns)
        self._tables[episode] = table
        if len(self._tables) > self.capacity:
            self._tables.popitem(last=False)
        return table
