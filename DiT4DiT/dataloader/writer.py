"""Write a LeRobot dataset folder from episodes in memory: the reader's counterpart, for the tiny-dataset tools
and Meta-World's demonstrations.

LeRobot v2.1 (one parquet and one mp4 per camera per episode, meta/*.jsonl) or v3.0 (many episodes per file,
meta/episodes/ and meta/tasks.parquet); cameras as lossless h264 videos or as PNG images in the parquet files; either
a GR00T-style meta/modality.json or, as lerobot itself writes, meta/stats.json. Needs numpy, pandas, pyarrow and
PyAV but not torch, so the simulators' environments write with it too.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from DiT4DiT.atomic_files import write_marked_folder
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS, DataConfig
from DiT4DiT.errors import UsageError

log = logging.getLogger(__name__)

CHUNKS_SIZE = 1000
LAYOUTS = {
    "v2.1": ("data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
             "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"),
    "v3.0": ("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
             "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"),
}


@dataclass(frozen=True)
class Columns:
    """What a dataset of one data config stores: raw state/action column layouts and the cameras' names."""

    config: DataConfig
    state_layout: tuple[tuple[str, int], ...]  # (key, width) in the order of the parquet column
    action_layout: tuple[tuple[str, int], ...]
    cameras: tuple[str, ...]  # stored as observation.images.<name>


def columns_for(config_name: str, state_layout=None, action_layout=None, cameras=None) -> Columns:
    """A data config's columns: its robot's stored layout and its cameras unless others are given."""
    if config_name not in DATA_CONFIGS:
        raise UsageError(f"data config '{config_name}' does not exist; known: {sorted(DATA_CONFIGS)}")
    config = DATA_CONFIGS[config_name]
    cameras = cameras or [key.split(".", 1)[1] for key in config.video_keys]
    return Columns(config, tuple(state_layout or config.state_layout), tuple(action_layout or config.action_layout),
                   tuple(cameras))


@dataclass
class Episode:
    state: np.ndarray  # (length, state width)
    action: np.ndarray  # (length, action width)
    frames: dict[str, np.ndarray]  # camera -> (length, H, W, 3) uint8


@dataclass(frozen=True)
class Storage:
    """How a dataset is laid out: LeRobot version, cameras as videos or images, episodes per v3.0 file, and
    whether the GR00T-style meta/modality.json is added (lerobot itself never writes one; it writes stats.json)."""

    version: str = "v2.1"
    images: bool = False
    episodes_per_file: int | None = None  # v3.0: None = every episode in one file
    modality: bool = True
    fps: int = 15
    gop: int = 10
    codec: str = "libx264"


def video_codec() -> str:
    import av

    try:
        av.codec.Codec("libx264", "w")
        return "libx264"
    except av.error.FFmpegError:
        log.warning("this PyAV build cannot encode h264 (libx264); writing mpeg4 videos instead (lossy)")
        return "mpeg4"


def write_video(path: Path, frames: np.ndarray, fps: int, gop: int, codec: str) -> None:
    """Encode (N, H, W, 3) uint8 frames as yuv420p, frame i at i/fps, a keyframe every `gop` frames.

    h264 at qp 0 is lossless in yuv420p: a frame decodes the same whichever file or position it is stored at,
    so a v2.1 and a v3.0 copy of a dataset give identical samples.
    """
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"g": str(gop), "bf": "0"}
    if codec == "libx264":
        options.update({"qp": "0", "preset": "veryfast"})
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.codec_context.thread_count = 1  # one thread: identical bytes on every run
        for i, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def _list_column(rows: np.ndarray) -> pa.Array:
    offsets = pa.array(np.arange(0, rows.size + 1, rows.shape[1], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(rows.reshape(-1), type=pa.float32()))


def _ranges(layout) -> dict:
    ranges, start = {}, 0
    for key, width in layout:
        ranges[key] = {"start": start, "end": start + width}
        start += width
    return ranges


def modality(columns: Columns) -> dict:
    language = columns.config.language_key.split(".", 1)[1]
    return {
        "state": _ranges(columns.state_layout),
        "action": _ranges(columns.action_layout),
        "video": {cam: {"original_key": f"observation.images.{cam}"} for cam in columns.cameras},
        "annotation": {language: {"original_key": "task_index"}},
    }


def info(columns: Columns, version: str, num_episodes: int, num_frames: int, fps: int, height: int, width: int,
         codec: str, images: bool = False) -> dict:
    if images:  # frames stored as PNG in the parquet files, as lerobot's use_videos=False writes them
        camera: dict[str, object] = {"dtype": "image", "shape": [height, width, 3],
                                     "names": ["height", "width", "channel"]}
    else:
        camera = {
            "dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channel"],
            "info": {"video.height": height, "video.width": width,
                     "video.codec": "h264" if codec == "libx264" else codec, "video.pix_fmt": "yuv420p",
                     "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False},
        }

    def vector(layout) -> dict:
        names = [f"{key}_{i}" for key, w in layout for i in range(w)]
        return {"dtype": "float32", "shape": [len(names)], "names": names}

    def scalar(dtype: str) -> dict:
        return {"dtype": dtype, "shape": [1], "names": None}

    data_path, video_path = LAYOUTS[version]
    return {
        "codebase_version": version, "robot_type": columns.config.name, "total_episodes": num_episodes,
        "total_frames": num_frames, "total_tasks": 1, "total_videos": 0 if images else num_episodes * len(columns.cameras),
        "total_chunks": 1, "chunks_size": CHUNKS_SIZE, "fps": fps, "splits": {"train": f"0:{num_episodes}"},
        "data_path": data_path, "video_path": None if images else video_path,
        "features": {
            **{f"observation.images.{cam}": camera for cam in columns.cameras},
            "observation.state": vector(columns.state_layout), "action": vector(columns.action_layout),
            "timestamp": scalar("float32"), "frame_index": scalar("int64"), "episode_index": scalar("int64"),
            "index": scalar("int64"), "task_index": scalar("int64"),
        },
    }


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _table(episode: Episode, episode_index: int, first_index: int, fps: int, images: bool) -> pa.Table:
    frame_index = np.arange(len(episode.state))
    cameras = {}
    if images:  # lerobot embeds each frame as {bytes, path} (the Image feature of HF datasets)
        image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        cameras = {f"observation.images.{cam}": pa.array([{"bytes": _png(f), "path": f"frame_{i:06d}.png"}
                                                          for i, f in enumerate(pixels)], type=image_type)
                   for cam, pixels in episode.frames.items()}
    return pa.table({
        "observation.state": _list_column(episode.state),
        "action": _list_column(episode.action),
        **cameras,
        "timestamp": pa.array((frame_index / fps).astype(np.float32)),
        "frame_index": pa.array(frame_index, type=pa.int64()),
        "episode_index": pa.array(np.full(len(frame_index), episode_index), type=pa.int64()),
        "index": pa.array(first_index + frame_index, type=pa.int64()),
        "task_index": pa.array(np.zeros(len(frame_index), dtype=np.int64)),
    })


def write_v2(folder: Path, columns: Columns, content: list[Episode], instruction: str, storage: Storage) -> None:
    data_path, video_path = LAYOUTS["v2.1"]
    first = 0
    for e, episode in enumerate(content):
        chunk = e // CHUNKS_SIZE
        parquet = folder / data_path.format(episode_chunk=chunk, episode_index=e)
        parquet.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(episode, e, first, storage.fps, storage.images), parquet)
        for cam, pixels in ({} if storage.images else episode.frames).items():
            key = f"observation.images.{cam}"
            write_video(folder / video_path.format(episode_chunk=chunk, video_key=key, episode_index=e), pixels,
                        storage.fps, storage.gop, storage.codec)
        first += len(episode.state)
    meta = folder / "meta"
    (meta / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": instruction}) + "\n")
    (meta / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e, "tasks": [instruction], "length": len(ep.state)}) + "\n"
        for e, ep in enumerate(content)))


def write_v3(folder: Path, columns: Columns, content: list[Episode], instruction: str, storage: Storage) -> None:
    """Episodes grouped into data files (and one video file per camera per group), as LeRobot v3.0 does."""
    data_path, video_path = LAYOUTS["v3.0"]
    fps = storage.fps
    per_file = storage.episodes_per_file or len(content)
    starts = np.concatenate([[0], np.cumsum([len(ep.state) for ep in content])]).astype(int)
    files = [list(range(i, min(i + per_file, len(content)))) for i in range(0, len(content), per_file)]
    file_of = {e: f for f, group in enumerate(files) for e in group}
    # Where each episode begins in its file, in seconds (files restart at 0).
    offset = {e: (starts[e] - starts[group[0]]) / fps for group in files for e in group}
    for f, group in enumerate(files):
        parquet = folder / data_path.format(chunk_index=0, file_index=f)
        parquet.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables([_table(content[e], e, int(starts[e]), fps, storage.images) for e in group]),
                       parquet)
        for cam in ({} if storage.images else columns.cameras):
            write_video(folder / video_path.format(video_key=f"observation.images.{cam}", chunk_index=0, file_index=f),
                        np.concatenate([content[e].frames[cam] for e in group]), fps, storage.gop, storage.codec)
    episodes = range(len(content))
    rows = {"episode_index": list(episodes), "length": [len(ep.state) for ep in content],
            "tasks": [[instruction]] * len(content), "data/chunk_index": [0] * len(content),
            "data/file_index": [file_of[e] for e in episodes], "dataset_from_index": starts[:-1].tolist(),
            "dataset_to_index": starts[1:].tolist()}
    for cam in ({} if storage.images else columns.cameras):
        key = f"observation.images.{cam}"
        rows[f"videos/{key}/chunk_index"] = [0] * len(content)
        rows[f"videos/{key}/file_index"] = [file_of[e] for e in episodes]
        rows[f"videos/{key}/from_timestamp"] = [offset[e] for e in episodes]
        rows[f"videos/{key}/to_timestamp"] = [offset[e] + len(content[e].state) / fps for e in episodes]
    target = folder / "meta/episodes/chunk-000/file-000.parquet"
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), target)
    # LeRobot v3.0 stores the task text as the index of a one-column (task_index) frame.
    pd.DataFrame({"task_index": [0]}, index=pd.Index([instruction], name="task")).to_parquet(folder / "meta/tasks.parquet")


def stats(content: list[Episode]) -> dict:
    """meta/stats.json as lerobot >= 0.4 writes it: per-episode statistics aggregated (mean weighted by frames,
    pooled std, extremes, and quantiles as the frame-weighted average of per-episode quantiles)."""
    out: dict[str, dict[str, list]] = {}
    for name in ("observation.state", "action"):
        episodes: list[np.ndarray] = [(ep.state if name == "observation.state" else ep.action).astype(np.float64)
                                      for ep in content]
        counts = np.asarray([len(v) for v in episodes], dtype=np.float64)
        weights = counts / counts.sum()
        mean = sum(w * v.mean(0) for w, v in zip(weights, episodes))
        second = sum(w * (v.var(0) + v.mean(0) ** 2) for w, v in zip(weights, episodes))
        quantiles = {f"q{q:02d}": sum(w * np.quantile(v, q / 100, axis=0) for w, v in zip(weights, episodes)).tolist()
                     for q in (1, 10, 50, 90, 99)}
        out[name] = {"mean": mean.tolist(), "std": np.sqrt(np.maximum(second - mean**2, 0.0)).tolist(),
                     "min": np.min([v.min(0) for v in episodes], axis=0).tolist(),
                     "max": np.max([v.max(0) for v in episodes], axis=0).tolist(), "count": [int(counts.sum())],
                     **quantiles}
    return out


def write_dataset(target: Path, columns: Columns, content: list[Episode], instruction: str,
                  storage: Storage, tool: str) -> Path:
    """The episodes as the dataset folder `target`, replacing what is there (the caller decides whether it may:
    check_replaceable), marked as written by `tool`, so that its --overwrite may replace it later.

    Built in a scratch folder beside `target` and renamed into place, so a reader never sees half a dataset."""
    height, width = next(iter(content[0].frames.values())).shape[1:3]

    def write(folder: Path) -> None:
        meta = folder / "meta"
        meta.mkdir()
        writer = write_v3 if storage.version == "v3.0" else write_v2
        writer(folder, columns, content, instruction, storage)
        total = sum(len(ep.state) for ep in content)
        (meta / "info.json").write_text(json.dumps(info(columns, storage.version, len(content), total, storage.fps,
                                                        height, width, storage.codec, storage.images), indent=4))
        if storage.modality:
            (meta / "modality.json").write_text(json.dumps(modality(columns), indent=4))
        else:
            (meta / "stats.json").write_text(json.dumps(stats(content), indent=4))

    return write_marked_folder(target, tool, write)
