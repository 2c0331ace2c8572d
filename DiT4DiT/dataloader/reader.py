"""Meta files and per-episode parquet tables of one GR00T-flavoured LeRobot dataset folder (read-only).

Both layouts: v2.x (one parquet and one mp4 per camera per episode, meta/*.jsonl) and v3.0 (many episodes per
parquet and mp4 file, meta/episodes/*/*.parquet and meta/tasks.parquet). Each folder's meta/info.json
(`codebase_version`) says which it is, so one mixture may hold both. Cameras are mp4 videos or, in datasets
written with `use_videos=False`, images stored in the parquet files (`dtype: image`). meta/modality.json is
optional: without it the caller gives one derived from info.json (DiT4DiT.dataloader.modality).
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.meta_schema import check_info, check_modality

META_FILES = ("info.json", "episodes.jsonl", "tasks.jsonl")
META_FILES_V3 = ("info.json", "tasks.parquet")
MODALITY = "modality.json"
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


def _read_jsonl_map(path: Path, key: str, value: str, cast) -> dict:
    """{row[key]: row[value]} of a JSON-lines meta file (episodes.jsonl, tasks.jsonl)."""
    mapping = {}
    for row in _read_jsonl(path):
        if key not in row or value not in row:
            raise DataError(f"{path}: line {row} lacks '{key}' or '{value}'")
        mapping[int(row[key])] = cast(row[value])
    return mapping


V3_EPISODE_COLUMNS = ("episode_index", "length", "data/chunk_index", "data/file_index")


def _read_v3_episodes(meta: Path) -> tuple[dict[int, int], dict[int, dict], dict[int, str]]:
    """Lengths, file locations (data and per-camera video file, video start time) and tasks of a v3.0 dataset."""
    episodes, files = {}, {}
    for path in sorted(meta.glob("episodes/*/*.parquet")):
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"{path}: episode table cannot be read ({exc}); regenerate it") from exc
        missing = [c for c in V3_EPISODE_COLUMNS if c not in table.column_names]
        if missing:
            raise DataError(f"{path}: LeRobot v3.0 episode tables have columns {list(V3_EPISODE_COLUMNS)}; "
                            f"{missing} are missing")
        located = [c for c in table.column_names if c.startswith(("data/", "videos/"))]
        for row in table.select(["episode_index", "length", *located]).to_pylist():
            episodes[int(row["episode_index"])] = int(row["length"])
            files[int(row["episode_index"])] = {c: row[c] for c in located}
    try:
        tasks_table = pq.read_table(meta / "tasks.parquet").to_pandas()
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{meta / 'tasks.parquet'}: cannot be read ({exc}); regenerate it") from exc
    if "task_index" not in tasks_table.columns:
        raise DataError(f"{meta / 'tasks.parquet'}: no 'task_index' column; LeRobot v3.0 writes one per task")
    # LeRobot v3.0 keeps the task text as the frame's index; a 'task' column is read too.
    names = tasks_table["task"] if "task" in tasks_table.columns else tasks_table.index
    tasks = {int(i): str(name) for i, name in zip(tasks_table["task_index"], names)}
    return episodes, files, tasks


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
        meta = self.root / "meta"
        info_path = meta / "info.json"
        if not info_path.is_file():
            raise DataError(f"{self.root}: no meta/info.json, so this is not a LeRobot dataset folder; point "
                            "data_mix (or data_root_dir) at the folder that holds meta/")
        self.info: dict = check_info(_read_json(info_path), info_path)
        self.version = "v3" if str(self.info.get("codebase_version", "")).startswith("v3") else "v2"
        needed = META_FILES_V3 if self.version == "v3" else META_FILES
        missing = [name for name in needed if not (meta / name).is_file()]
        if missing:
            raise DataError(
                f"{self.root}: missing meta/{', meta/'.join(missing)}. A LeRobot v2.x dataset needs "
                f"meta/{', meta/'.join(META_FILES)}; a v3.0 one meta/{', meta/'.join(META_FILES_V3)} and "
                "meta/episodes/; convert the dataset to one of those layouts (or fix data_root_dir / data_mix)"
            )
        if self.version == "v3" and not sorted(meta.glob("episodes/*/*.parquet")):
            raise DataError(f"{self.root}: LeRobot v3.0 dataset without meta/episodes/*/*.parquet: the recording was "
                            "not finalised; call dataset.finalize() after the last save_episode() (lerobot writes "
                            "the episode tables then), or re-record")
        modality_path = meta / MODALITY
        # None until the caller derives one (build.py); an explicit file always wins.
        self.modality: dict | None = (check_modality(_read_json(modality_path), modality_path)
                                      if modality_path.is_file() else None)
        if self.version == "v3":
            self.episodes, self._files, self.tasks = _read_v3_episodes(meta)
        else:
            self.episodes, self._files = _read_jsonl_map(meta / "episodes.jsonl", "episode_index", "length", int), {}
            self.tasks = _read_jsonl_map(meta / "tasks.jsonl", "task_index", "task", str)
        if not self.episodes:
            raise DataError(f"{meta}: no episodes listed")

    def meta_files(self) -> list[Path]:
        """The meta files whose content defines the dataset (what a cache key must cover)."""
        modality = [self.meta_path(MODALITY)] if self.meta_path(MODALITY).is_file() else []
        if self.version == "v3":
            return ([self.meta_path(n) for n in META_FILES_V3] + modality
                    + sorted(self.root.glob("meta/episodes/*/*.parquet")))
        return [self.meta_path(n) for n in META_FILES] + modality

    def camera_dtype(self, video_key: str) -> str:
        """'video' (mp4 files) or 'image' (frames stored in the parquet column `video_key`)."""
        return self.info.get("features", {}).get(video_key, {}).get("dtype", "video")

    @property
    def name(self) -> str:
        return self.root.name

    def meta_path(self, name: str) -> Path:
        return self.root / "meta" / name

    def episode_chunk(self, episode: int) -> int:
        return episode // int(self.info["chunks_size"])

    def parquet_path(self, episode: int) -> Path:
        if self.version == "v3":
            where = self._files[episode]
            return self.root / self.info["data_path"].format(chunk_index=where["data/chunk_index"],
                                                             file_index=where["data/file_index"])
        relative = self.info["data_path"].format(episode_chunk=self.episode_chunk(episode), episode_index=episode)
        return self.root / relative

    def video_path(self, episode: int, video_key: str) -> Path:
        template = self.info.get("video_path")
        if not template:
            raise DataError(f"{self.meta_path('info.json')}: 'video_path' is empty, but camera '{video_key}' is a "
                            f"video; set features.{video_key}.dtype to 'image' if its frames are in the parquet files")
        if self.version == "v3":
            where = self._video_entry(episode, video_key, "file_index")
            return self.root / template.format(video_key=video_key, file_index=where,
                                               chunk_index=self._video_entry(episode, video_key, "chunk_index"))
        relative = template.format(episode_chunk=self.episode_chunk(episode), episode_index=episode, video_key=video_key)
        return self.root / relative

    def video_start(self, episode: int, video_key: str) -> float:
        """Where the episode begins in its video file, in seconds (v3.0 files hold many episodes; v2.x: 0)."""
        if self.version == "v3":
            return float(self._video_entry(episode, video_key, "from_timestamp"))
        return 0.0

    def _video_entry(self, episode: int, video_key: str, field: str):
        column = f"videos/{video_key}/{field}"
        if column not in self._files[episode]:
            raise DataError(f"{self.root / 'meta/episodes'}: episode {episode} has no '{column}'; the camera "
                            f"'{video_key}' is not in this v3.0 dataset's episode table")
        return self._files[episode][column]

    def _modality_entry(self, key: str, config_name: str) -> tuple[str, str, dict]:
        group, _, sub = key.partition(".")
        entries = (self.modality or {}).get(group)
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
                        "restore it or drop the episode from the meta folder's episode list")
    try:
        schema_names = pq.read_schema(path).names
        needed = columns + (["episode_index"] if layout.version == "v3" else [])
        missing = [c for c in needed if c not in schema_names]
        if missing:
            raise DataError(f"{path}: episode {episode} lacks column(s) {missing} (has {schema_names}); "
                            "fix meta/modality.json original_key entries or the parquet file")
        if layout.version == "v3":
            table = _episode_rows(path, path.stat().st_mtime_ns, tuple(columns), episode)
        else:
            table = pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{path}: episode {episode} parquet cannot be read ({exc}); regenerate the file") from exc
    return {c: _column_array(table, c, path) for c in columns}


@functools.lru_cache(maxsize=2)
def _v3_file(path: Path, mtime_ns: int, columns: tuple[str, ...]) -> tuple[pa.Table, np.ndarray]:
    """A v3.0 data file's columns and episode of each row. Episodes are read in order when indexing, so keeping
    the last files makes a pass over E episodes read each file once, not E times."""
    table = pq.read_table(path, columns=[*columns, "episode_index"])
    return table, table.column("episode_index").to_numpy()


def _episode_rows(path: Path, mtime_ns: int, columns: tuple[str, ...], episode: int) -> pa.Table:
    table, episodes = _v3_file(path, mtime_ns, columns)
    return table.take(pa.array(np.flatnonzero(episodes == episode))).select(list(columns))


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
