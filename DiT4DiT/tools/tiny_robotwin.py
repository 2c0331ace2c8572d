"""Write a small synthetic dataset in RoboTwin's LeRobot v2.1 layout, deterministic from a seed.

Each task folder holds a few short episodes: three h264 cameras, 14-dim float32 state and action
(action = next state), meta files as StarVLA's RoboTwin datasets. Frames draw a blob whose position, size
and colour follow the joints and grippers, so a model can learn actions from images and state.

    python -m DiT4DiT.tools.tiny_robotwin --out playground/Datasets/robotwin_tiny
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import shutil
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

DEFAULT_OUT = Path("playground/Datasets/robotwin_tiny")
DEFAULT_TASKS = ("adjust_bottle", "place_a2b_left", "place_a2b_right")
INSTRUCTIONS = {
    "adjust_bottle": "Pick up the bottle on the table and set it upright.",
    "place_a2b_left": "Place object A to the left of object B.",
    "place_a2b_right": "Place object A to the right of object B.",
}
CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")
ARM_MOTORS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")
MOTORS = tuple(f"{side}_{m}" for side in ("left", "right") for m in ARM_MOTORS)
# Raw order [L6 joints, L gripper, R6 joints, R gripper], as StarVLA's RoboTwin modality.json slices it.
MODALITY_RANGES = {"left_joints": (0, 6), "left_gripper": (6, 7), "right_joints": (7, 13), "right_gripper": (13, 14)}
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
CHUNKS_SIZE = 1000
# What each camera shows: (x joint, y joint, gripper) indices into the 14-dim state, and the blob's base colour.
CAMERA_VIEW = {
    "cam_high": ((0, 7, 6), (230, 60, 40)),
    "cam_left_wrist": ((1, 2, 6), (40, 200, 70)),
    "cam_right_wrist": ((8, 9, 13), (50, 90, 230)),
}


def state_trajectory(rng: np.random.Generator, length: int) -> np.ndarray:
    """(length, 14) float32: smooth joint sinusoids in about [-1.3, 1.3], grippers swinging between 0 and 1."""
    t = np.arange(length, dtype=np.float64)[:, None] / max(length - 1, 1)
    offset = rng.uniform(-0.4, 0.4, 14)
    amplitude = rng.uniform(0.3, 0.9, 14)
    cycles = rng.uniform(0.5, 1.5, 14)
    phase = rng.uniform(0.0, 2 * np.pi, 14)
    wave = np.sin(2 * np.pi * cycles * t + phase)
    state = offset + amplitude * wave
    grippers = [MOTORS.index("left_gripper"), MOTORS.index("right_gripper")]
    state[:, grippers] = np.clip(0.5 + 0.6 * wave[:, grippers], 0.0, 1.0)
    return state.astype(np.float32)


@functools.lru_cache(maxsize=4)
def _grid(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres as (y, x) in [0, 1]."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    return yy / max(height - 1, 1), xx / max(width - 1, 1)


def render_frame(camera: str, state: np.ndarray, task_position: int, height: int, width: int) -> np.ndarray:
    """(height, width, 3) uint8 image of one camera for one state: a soft blob on a shaded background."""
    (x_joint, y_joint, gripper), colour = CAMERA_VIEW[camera]
    yy, xx = _grid(height, width)
    tint = np.array([(37 * task_position) % 60, (53 * task_position) % 60, (29 * task_position) % 60], np.float64)
    image = 40.0 + tint + 60.0 * xx[..., None] + 40.0 * yy[..., None]
    cx = 0.5 + 0.35 * np.tanh(float(state[x_joint]))
    cy = 0.5 + 0.35 * np.tanh(float(state[y_joint]))
    radius = 0.12 + 0.1 * float(state[gripper])
    distance = np.hypot((xx - cx) * width / height, yy - cy)
    alpha = np.clip((radius - distance) / 0.05 + 0.5, 0.0, 1.0)[..., None]
    shade = 0.7 + 0.3 * np.tanh(float(state[(x_joint + 3) % 14]))
    image = (1.0 - alpha) * image + alpha * np.asarray(colour, np.float64) * shade
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def _video_codec() -> str:
    import av

    try:
        av.codec.Codec("libx264", "w")
        return "libx264"
    except av.error.FFmpegError:
        log.warning("this PyAV build cannot encode h264 (libx264); writing mpeg4 videos instead")
        return "mpeg4"


def write_video(path: Path, frames: np.ndarray, fps: int, gop: int, codec: str) -> None:
    """Encode (N, H, W, 3) uint8 frames as yuv420p, frame i at i/fps, a keyframe every `gop` frames."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"g": str(gop), "bf": "0"}
    if codec == "libx264":
        options.update({"crf": "12", "preset": "veryfast"})
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


def _info(num_episodes: int, num_frames: int, fps: int, height: int, width: int, codec: str) -> dict:
    video = {
        "dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channel"],
        "info": {"video.height": height, "video.width": width, "video.codec": "h264" if codec == "libx264" else codec,
                 "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": fps, "video.channels": 3,
                 "has_audio": False},
    }
    vector = {"dtype": "float32", "shape": [14], "names": list(MOTORS)}

    def scalar(dtype: str) -> dict:
        return {"dtype": dtype, "shape": [1], "names": None}

    return {
        "codebase_version": "v2.1", "robot_type": "aloha-agilex", "total_episodes": num_episodes,
        "total_frames": num_frames, "total_tasks": 1, "total_videos": num_episodes * len(CAMERAS), "total_chunks": 1,
        "chunks_size": CHUNKS_SIZE, "fps": fps, "splits": {"train": f"0:{num_episodes}"},
        "data_path": DATA_PATH, "video_path": VIDEO_PATH,
        "features": {
            **{f"observation.images.{cam}": video for cam in CAMERAS},
            "observation.state": vector, "action": vector,
            "timestamp": scalar("float32"), "frame_index": scalar("int64"), "episode_index": scalar("int64"),
            "index": scalar("int64"), "task_index": scalar("int64"),
        },
    }


def _modality() -> dict:
    ranges = {key: {"start": start, "end": end} for key, (start, end) in MODALITY_RANGES.items()}
    return {
        "state": ranges,
        "action": ranges,
        "video": {cam: {"original_key": f"observation.images.{cam}"} for cam in CAMERAS},
        "annotation": {"human.action.task_description": {"original_key": "task_index"}},
    }


def write_task(folder: Path, task: str, task_position: int, *, seed: int, episodes: int, frames: tuple[int, int],
               fps: int, height: int, width: int, gop: int, codec: str) -> None:
    """One task's dataset folder (written in place; the caller moves it into position)."""
    rng = np.random.default_rng([seed, task_position])
    lengths = rng.integers(frames[0], frames[1] + 1, size=episodes)
    instruction = INSTRUCTIONS.get(task, task.replace("_", " "))
    index = 0
    for episode, length in enumerate(lengths):
        state = state_trajectory(rng, int(length))
        action = np.concatenate([state[1:], state[-1:]])  # the action moves to the next state
        frame_index = np.arange(length)
        table = pa.table({
            "observation.state": _list_column(state),
            "action": _list_column(action),
            "timestamp": pa.array((frame_index / fps).astype(np.float32)),
            "frame_index": pa.array(frame_index, type=pa.int64()),
            "episode_index": pa.array(np.full(length, episode), type=pa.int64()),
            "index": pa.array(index + frame_index, type=pa.int64()),
            "task_index": pa.array(np.zeros(length, dtype=np.int64)),
        })
        chunk = episode // CHUNKS_SIZE
        parquet = folder / DATA_PATH.format(episode_chunk=chunk, episode_index=episode)
        parquet.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, parquet)
        for camera in CAMERAS:
            pixels = np.stack([render_frame(camera, s, task_position, height, width) for s in state])
            video_key = f"observation.images.{camera}"
            write_video(folder / VIDEO_PATH.format(episode_chunk=chunk, video_key=video_key, episode_index=episode),
                        pixels, fps, gop, codec)
        index += int(length)
    meta = folder / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "info.json").write_text(json.dumps(_info(episodes, index, fps, height, width, codec), indent=4))
    (meta / "modality.json").write_text(json.dumps(_modality(), indent=4))
    (meta / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": instruction}) + "\n")
    (meta / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e, "tasks": [instruction], "length": int(n)}) + "\n" for e, n in enumerate(lengths)))


def generate(out: str | Path = DEFAULT_OUT, *, seed: int = 0, tasks=DEFAULT_TASKS, episodes: int = 3,
             frames: tuple[int, int] = (24, 40), fps: int = 15, height: int = 48, width: int = 64, gop: int = 10,
             overwrite: bool = False) -> list[Path]:
    """Write one dataset folder per task under `out`; each appears whole (built aside, then moved in)."""
    out = Path(out)
    if height % 2 or width % 2 or min(height, width) < 16:
        raise ValueError(f"--height {height} / --width {width}: yuv420p needs even sizes of at least 16")
    if episodes < 1 or not 2 <= frames[0] <= frames[1]:
        raise ValueError(f"--episodes {episodes}, --frames {frames}: need >= 1 episode and 2 <= min <= max frames")
    existing = [out / t for t in tasks if (out / t).exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{existing[0]} already exists; pass --overwrite to replace the generated folders")
    codec = _video_codec()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for position, task in enumerate(tasks):
        with tempfile.TemporaryDirectory(dir=out, prefix=f".{task}.") as scratch:
            folder = Path(scratch) / task
            write_task(folder, task, position, seed=seed, episodes=episodes, frames=frames, fps=fps, height=height,
                       width=width, gop=gop, codec=codec)
            if (out / task).exists():
                shutil.rmtree(out / task)
            folder.rename(out / task)
        written.append(out / task)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder that receives one folder per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="RoboTwin task names (folder names)")
    parser.add_argument("--episodes", type=int, default=3, help="episodes per task")
    parser.add_argument("--min-frames", type=int, default=24)
    parser.add_argument("--max-frames", type=int, default=40)
    parser.add_argument("--fps", type=int, default=15)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--gop", type=int, default=10, help="frames between keyframes")
    parser.add_argument("--overwrite", action="store_true", help="replace task folders that already exist")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        written = generate(args.out, seed=args.seed, tasks=args.tasks, episodes=args.episodes,
                           frames=(args.min_frames, args.max_frames), fps=args.fps, height=args.height,
                           width=args.width, gop=args.gop, overwrite=args.overwrite)
    except (ValueError, FileExistsError) as exc:
        print(f"tiny_robotwin: {exc}", file=sys.stderr)
        return 2
    for folder in written:
        print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
