"""Write tiny synthetic datasets for a named mixture: one folder per dataset, in the layout its data config reads.

Each dataset gets a few short episodes: one lossless h264 video per camera of the data config, state and action
columns sliced by a GR00T modality.json into the config's keys (widths typical of the robot), one instruction.
Frames draw a blob whose position, size and colour follow the state, so a model can learn actions from images.
Deterministic from a seed; LeRobot v2.1 layout by default, v3.0 (many episodes per file) on request. With
--data_config, one dataset exactly as lerobot writes it: no modality.json, meta/stats.json, v3.0 with several
files per chunk (--episodes_per_file), cameras as videos or (--images) as PNG images in the parquet files.

    python -m DiT4DiT.tools.tiny_dataset --data_mix libero_all --out playground/Datasets/libero_tiny
    python -m DiT4DiT.tools.tiny_dataset --data_mix robotwin --out DIR --datasets 3 --lerobot_version v3.0
    python -m DiT4DiT.tools.tiny_dataset --data_config robotwin --out DIR/my_set --episodes_per_file 2 [--images]
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import DATA_TOOLS, require
    require("python -m DiT4DiT.tools.tiny_dataset", DATA_TOOLS)

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from DiT4DiT.dataloader.data_configs import DATA_CONFIGS, DataConfig
from DiT4DiT.dataloader.layout import DATASET_MARK
from DiT4DiT.errors import UsageError, run_main
from DiT4DiT.logging_setup import configure_logging
from DiT4DiT.tools.outputs import OutputError, check_out, check_replaceable_folder

log = logging.getLogger(__name__)

CHUNKS_SIZE = 1000
LAYOUTS = {
    "v2.1": ("data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
             "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"),
    "v3.0": ("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
             "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"),
}
PALETTE = ((230, 60, 40), (40, 200, 70), (50, 90, 230), (220, 190, 40))

@dataclass(frozen=True)
class Camera:
    """What a camera shows: (x, y, size) dims of the state vector and the blob's base colour."""

    dims: tuple[int, int, int]
    colour: tuple[int, int, int]


@dataclass(frozen=True)
class Robot:
    """How one data config's datasets are stored: raw column layouts, cameras, the annotation column."""

    config: DataConfig
    state_layout: tuple[tuple[str, int], ...]  # (key, width) in the order of the parquet column
    action_layout: tuple[tuple[str, int], ...]
    cameras: dict[str, Camera]  # camera name (video.<name>) -> what it shows

    @property
    def state_dim(self) -> int:
        return sum(w for _, w in self.state_layout)

    @property
    def action_dim(self) -> int:
        return sum(w for _, w in self.action_layout)


def robot_for(config_name: str, state_layout=None, action_layout=None, cameras=None) -> Robot:
    """The storage of a data config: its robot's stored column layout unless one is given; generic cameras."""
    if config_name not in DATA_CONFIGS:
        raise UsageError(f"data config '{config_name}' does not exist; known: {sorted(DATA_CONFIGS)}")
    config = DATA_CONFIGS[config_name]
    state = state_layout or config.state_layout
    action = action_layout or config.action_layout
    if cameras is None:
        dim = sum(w for _, w in state)
        cameras = {key.split(".", 1)[1]: Camera(((3 * i) % dim, (3 * i + 1) % dim, (3 * i + 2) % dim),
                                                PALETTE[i % len(PALETTE)])
                   for i, key in enumerate(config.video_keys)}
    return Robot(config, tuple(state), tuple(action), dict(cameras))


def trajectory(rng: np.random.Generator, length: int, width: int, binary_dims: list[int]) -> np.ndarray:
    """(length, width) float32: smooth sinusoids in about [-1.3, 1.3]; binary dims swing between 0 and 1."""
    t = np.arange(length, dtype=np.float64)[:, None] / max(length - 1, 1)
    offset = rng.uniform(-0.4, 0.4, width)
    amplitude = rng.uniform(0.3, 0.9, width)
    cycles = rng.uniform(0.5, 1.5, width)
    phase = rng.uniform(0.0, 2 * np.pi, width)
    wave = np.sin(2 * np.pi * cycles * t + phase)
    values = offset + amplitude * wave
    values[:, binary_dims] = np.clip(0.5 + 0.6 * wave[:, binary_dims], 0.0, 1.0)
    return values.astype(np.float32)


@functools.lru_cache(maxsize=4)
def _grid(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres as (y, x) in [0, 1]."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    return yy / max(height - 1, 1), xx / max(width - 1, 1)


def render_frame(camera: Camera, state: np.ndarray, task_position: int, height: int, width: int) -> np.ndarray:
    """(height, width, 3) uint8 image of one camera for one state: a soft blob on a shaded background."""
    x_dim, y_dim, size_dim = camera.dims
    yy, xx = _grid(height, width)
    tint = np.array([(37 * task_position) % 60, (53 * task_position) % 60, (29 * task_position) % 60], np.float64)
    image = 40.0 + tint + 60.0 * xx[..., None] + 40.0 * yy[..., None]
    cx = 0.5 + 0.35 * np.tanh(float(state[x_dim]))
    cy = 0.5 + 0.35 * np.tanh(float(state[y_dim]))
    radius = 0.12 + 0.05 * (1.0 + np.tanh(float(state[size_dim])))
    distance = np.hypot((xx - cx) * width / height, yy - cy)
    alpha = np.clip((radius - distance) / 0.05 + 0.5, 0.0, 1.0)[..., None]
    shade = 0.7 + 0.3 * np.tanh(float(state[(x_dim + 3) % len(state)]))
    image = (1.0 - alpha) * image + alpha * np.asarray(camera.colour, np.float64) * shade
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


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


def modality(robot: Robot) -> dict:
    language = robot.config.language_key.split(".", 1)[1]
    return {
        "state": _ranges(robot.state_layout),
        "action": _ranges(robot.action_layout),
        "video": {cam: {"original_key": f"observation.images.{cam}"} for cam in robot.cameras},
        "annotation": {language: {"original_key": "task_index"}},
    }


def info(robot: Robot, version: str, num_episodes: int, num_frames: int, fps: int, height: int, width: int,
         codec: str, images: bool = False) -> dict:
    if images:  # frames stored as PNG in the parquet files, as lerobot's use_videos=False writes them
        camera = {"dtype": "image", "shape": [height, width, 3], "names": ["height", "width", "channel"]}
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
        "codebase_version": version, "robot_type": robot.config.name, "total_episodes": num_episodes,
        "total_frames": num_frames, "total_tasks": 1, "total_videos": 0 if images else num_episodes * len(robot.cameras),
        "total_chunks": 1, "chunks_size": CHUNKS_SIZE, "fps": fps, "splits": {"train": f"0:{num_episodes}"},
        "data_path": data_path, "video_path": None if images else video_path,
        "features": {
            **{f"observation.images.{cam}": camera for cam in robot.cameras},
            "observation.state": vector(robot.state_layout), "action": vector(robot.action_layout),
            "timestamp": scalar("float32"), "frame_index": scalar("int64"), "episode_index": scalar("int64"),
            "index": scalar("int64"), "task_index": scalar("int64"),
        },
    }


@dataclass
class Episode:
    state: np.ndarray
    action: np.ndarray
    frames: dict[str, np.ndarray]  # camera -> (length, H, W, 3)


def make_episodes(robot: Robot, task_position: int, *, seed: int, episodes: int, frames: tuple[int, int],
                  height: int, width: int) -> list[Episode]:
    """The content of a dataset: the action is the next step of the trajectory the state follows."""
    rng = np.random.default_rng([seed, task_position])
    lengths = rng.integers(frames[0], frames[1] + 1, size=episodes)
    keys = [k for k, w in robot.state_layout for _ in range(w)]
    action_keys = [k for k, w in robot.action_layout for _ in range(w)]
    widest = max(len(keys), len(action_keys))
    binary = sorted({i for i, k in enumerate(keys) if "gripper" in k} | {i for i, k in enumerate(action_keys)
                                                                         if "gripper" in k})
    content = []
    for length in lengths:
        path = trajectory(rng, int(length), widest, binary)
        state = path[:, : len(keys)]
        action = np.concatenate([path[1:], path[-1:]])[:, : len(action_keys)]  # the last step holds still
        views = {cam: np.stack([render_frame(view, s, task_position, height, width) for s in state])
                 for cam, view in robot.cameras.items()}
        content.append(Episode(state, action, views))
    return content


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


def write_v2(folder: Path, robot: Robot, content: list[Episode], instruction: str, storage: Storage) -> None:
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


def write_v3(folder: Path, robot: Robot, content: list[Episode], instruction: str, storage: Storage) -> None:
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
        for cam in ({} if storage.images else robot.cameras):
            write_video(folder / video_path.format(video_key=f"observation.images.{cam}", chunk_index=0, file_index=f),
                        np.concatenate([content[e].frames[cam] for e in group]), fps, storage.gop, storage.codec)
    episodes = range(len(content))
    rows = {"episode_index": list(episodes), "length": [len(ep.state) for ep in content],
            "tasks": [[instruction]] * len(content), "data/chunk_index": [0] * len(content),
            "data/file_index": [file_of[e] for e in episodes], "dataset_from_index": starts[:-1].tolist(),
            "dataset_to_index": starts[1:].tolist()}
    for cam in ({} if storage.images else robot.cameras):
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
    out = {}
    for name in ("observation.state", "action"):
        episodes = [(ep.state if name == "observation.state" else ep.action).astype(np.float64) for ep in content]
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


def write_dataset(folder: Path, robot: Robot, instruction: str, task_position: int, *, seed: int, episodes: int,
                  frames: tuple[int, int], height: int, width: int, storage: Storage) -> None:
    """One dataset folder (written in place; the caller moves it into position)."""
    content = make_episodes(robot, task_position, seed=seed, episodes=episodes, frames=frames, height=height,
                            width=width)
    write_content(folder, robot, content, instruction, height=height, width=width, storage=storage)


def write_content(folder: Path, robot: Robot, content: list[Episode], instruction: str, *, height: int, width: int,
                  storage: Storage) -> None:
    """Episodes (generated here or recorded elsewhere, e.g. in a simulator) as one dataset folder, written in place."""
    meta = folder / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    writer = write_v3 if storage.version == "v3.0" else write_v2
    writer(folder, robot, content, instruction, storage)
    total = sum(len(ep.state) for ep in content)
    (meta / "info.json").write_text(json.dumps(info(robot, storage.version, len(content), total, storage.fps, height,
                                                    width, storage.codec, storage.images), indent=4))
    if storage.modality:
        (meta / "modality.json").write_text(json.dumps(modality(robot), indent=4))
    else:
        (meta / "stats.json").write_text(json.dumps(stats(content), indent=4))


def check_settings(episodes: int, frames: tuple[int, int], height: int, width: int, version: str) -> None:
    if height % 2 or width % 2 or min(height, width) < 16:
        raise UsageError(f"--height {height} / --width {width}: yuv420p needs even sizes of at least 16")
    if episodes < 1 or not 2 <= frames[0] <= frames[1]:
        raise UsageError(f"--episodes {episodes}, --frames {frames}: need >= 1 episode and 2 <= min <= max frames")
    if version not in LAYOUTS:
        raise UsageError(f"--lerobot_version {version}: write one of {sorted(LAYOUTS)}")


def write_folders(out: Path, items: list[tuple[str, Robot, str]], *, overwrite: bool, seed: int, episodes: int,
                  frames: tuple[int, int], fps: int, height: int, width: int, gop: int, version: str,
                  images: bool = False, episodes_per_file: int | None = None, modality: bool = True) -> list[Path]:
    """Write (folder name, robot, instruction) datasets under `out`; each appears whole (built aside, moved in)."""
    check_settings(episodes, frames, height, width, version)
    if episodes_per_file is not None and (episodes_per_file < 1 or version != "v3.0"):
        raise UsageError(f"--episodes_per_file {episodes_per_file}: a positive count, with --lerobot_version v3.0")
    check_out(out, folder=True)
    for name, _, _ in items:  # each dataset folder replaced is one written here before (or an empty one)
        check_out(out / name, folder=True, owned=out / name)
        check_replaceable_folder(out / name, str(DATASET_MARK))
    existing = [out / name for name, _, _ in items if (out / name).exists()]
    if existing and not overwrite:
        raise OutputError(f"{existing[0]} already exists; pass --overwrite to replace the generated folders")
    storage = Storage(version=version, images=images, episodes_per_file=episodes_per_file, modality=modality, fps=fps,
                      gop=gop, codec="png" if images else video_codec())
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for position, (name, robot, instruction) in enumerate(items):
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as scratch:
            folder = Path(scratch) / target.name
            write_dataset(folder, robot, instruction, position, seed=seed, episodes=episodes, frames=frames,
                          height=height, width=width, storage=storage)
            if target.exists():
                shutil.rmtree(target)
            folder.rename(target)
        written.append(target)
    return written


def generate(data_mix: str, out: str | Path, *, datasets: int | None = None, seed: int = 0, episodes: int = 3,
             frames: tuple[int, int] = (24, 40), fps: int = 15, height: int = 48, width: int = 64, gop: int = 10,
             version: str = "v2.1", overwrite: bool = False, **storage) -> list[Path]:
    """Tiny datasets for the first `datasets` entries (default: all) of mixture `data_mix` under `out`."""
    from DiT4DiT.dataloader.mixtures import DATASET_NAMED_MIXTURES, resolve_mixture

    if data_mix not in DATASET_NAMED_MIXTURES:
        raise UsageError(f"--data_mix {data_mix}: not a mixture; known: {', '.join(DATASET_NAMED_MIXTURES)}")
    entries = resolve_mixture(data_mix)[:datasets]
    items = [(e.dataset, robot_for(e.data_config), f"{Path(e.dataset).name.replace('_', ' ')} task") for e in entries]
    return write_folders(Path(out), items, overwrite=overwrite, seed=seed, episodes=episodes, frames=frames, fps=fps,
                         height=height, width=width, gop=gop, version=version, **storage)


def generate_lerobot(data_config: str, folder: str | Path, *, version: str = "v3.0", images: bool = False,
                     episodes_per_file: int | None = None, seed: int = 0, episodes: int = 3,
                     frames: tuple[int, int] = (24, 40), fps: int = 15, height: int = 48, width: int = 64,
                     gop: int = 10, overwrite: bool = False) -> Path:
    """One dataset of `data_config`'s robot laid out exactly as lerobot writes it (no modality.json), at `folder`."""
    folder = Path(folder)
    robot = robot_for(data_config)
    return write_folders(folder.parent, [(folder.name, robot, f"{data_config.replace('_', ' ')} task")],
                         overwrite=overwrite, seed=seed, episodes=episodes, frames=frames, fps=fps, height=height,
                         width=width, gop=gop, version=version, images=images, episodes_per_file=episodes_per_file,
                         modality=False)[0]


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=3, help="episodes per dataset")
    parser.add_argument("--min-frames", type=int, default=24)
    parser.add_argument("--max-frames", type=int, default=40)
    parser.add_argument("--fps", type=int, default=15)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--gop", type=int, default=10, help="frames between keyframes")
    parser.add_argument("--overwrite", action="store_true", help="replace dataset folders that already exist")


def size_settings(args: argparse.Namespace) -> dict:
    return dict(seed=args.seed, episodes=args.episodes, frames=(args.min_frames, args.max_frames), fps=args.fps,
                height=args.height, width=args.width, gop=args.gop, overwrite=args.overwrite)


def run_cli(name: str, write) -> int:
    """Run a generator's `write()` and print the folders; a bad setting is one line starting with `name`."""
    configure_logging()
    return run_main(lambda: print(*write(), sep="\n"), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--data_mix", help="mixture name (datasets.vla_data.data_mix): one folder per dataset under --out")
    what.add_argument("--data_config", help="one dataset of this data config's robot, at --out, laid out exactly as "
                      "lerobot writes it (no meta/modality.json; meta/stats.json)")
    parser.add_argument("--out", type=Path, required=True, help="folder that receives the datasets (data_root_dir), "
                        "or with --data_config the dataset folder itself")
    parser.add_argument("--datasets", type=int, default=None, help="only the first K datasets of the mixture")
    parser.add_argument("--lerobot_version", default=None, help="layout to write: v2.1 or v3.0 (default: v2.1 for "
                        "--data_mix, v3.0 for --data_config)")
    parser.add_argument("--images", action="store_true", help="cameras as PNG images in the parquet files, no videos")
    parser.add_argument("--episodes_per_file", type=int, default=None, help="v3.0: episodes per data/video file")
    add_size_arguments(parser)
    args = parser.parse_args(argv)
    storage = dict(images=args.images, episodes_per_file=args.episodes_per_file)
    if args.data_config:
        return run_cli("tiny_dataset", lambda: [generate_lerobot(args.data_config, args.out,
                                                                 version=args.lerobot_version or "v3.0", **storage,
                                                                 **size_settings(args))])
    return run_cli("tiny_dataset", lambda: generate(args.data_mix, args.out, datasets=args.datasets,
                                                    version=args.lerobot_version or "v2.1", **storage,
                                                    **size_settings(args)))


if __name__ == "__main__":
    sys.exit(main())
