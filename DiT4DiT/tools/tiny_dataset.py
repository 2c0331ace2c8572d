"""Write tiny synthetic datasets for a named mixture: one folder per dataset, in the layout its data config reads.

This tool makes the content; DiT4DiT.dataloader.writer lays it out. Each dataset gets a few short episodes: one
camera stream per camera of the data config, state and action columns in the config's keys (widths typical of the
robot), one instruction. Frames draw a blob whose position, size and colour follow the state, so a model can learn
actions from images. Deterministic from a seed; LeRobot v2.1 with a GR00T modality.json by default, v3.0 (many
episodes per file) on request. With --data_config, one dataset exactly as lerobot writes it: no modality.json,
meta/stats.json, v3.0 with several files per chunk (--episodes_per_file), cameras as videos or (--images) as PNG
images in the parquet files.

    python -m DiT4DiT.tools.tiny_dataset --data_mix libero_all --out playground/Datasets/libero_tiny
    python -m DiT4DiT.tools.tiny_dataset --data_mix robotwin --out DIR --datasets 3 --lerobot_version v3.0
    python -m DiT4DiT.tools.tiny_dataset --data_config robotwin --out DIR/my_set --episodes_per_file 2 [--images]
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import DATA_TOOLS, require
    require("python -m DiT4DiT.tools.tiny_dataset", DATA_TOOLS)

import numpy as np

from DiT4DiT.dataloader.writer import LAYOUTS, Columns, Episode, Storage, columns_for, video_codec, write_dataset
from DiT4DiT.errors import UsageError, run_main
from DiT4DiT.logging_setup import configure_logging
from DiT4DiT.host.output_paths import check_out, check_replaceable

TOOL = "tiny_dataset"  # the marker in each folder it writes (tiny_robotwin's too: the same writer)
PALETTE = ((230, 60, 40), (40, 200, 70), (50, 90, 230), (220, 190, 40))


@dataclass(frozen=True)
class Camera:
    """What a camera shows: (x, y, size) dims of the state vector and the blob's base colour."""

    dims: tuple[int, int, int]
    colour: tuple[int, int, int]


@dataclass(frozen=True)
class Robot:
    """A data config's stored columns (what the writer writes) and what each of its cameras shows."""

    columns: Columns
    views: dict[str, Camera]  # camera name (video.<name>) -> what it shows


def robot_for(config_name: str, state_layout=None, action_layout=None, views=None) -> Robot:
    """The columns of a data config (its robot's stored layout unless one is given); generic views unless given."""
    columns = columns_for(config_name, state_layout, action_layout, list(views) if views else None)
    if views is None:
        dim = sum(w for _, w in columns.state_layout)
        views = {cam: Camera(((3 * i) % dim, (3 * i + 1) % dim, (3 * i + 2) % dim), PALETTE[i % len(PALETTE)])
                 for i, cam in enumerate(columns.cameras)}
    return Robot(columns, dict(views))


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


def make_episodes(robot: Robot, task_position: int, *, seed: int, episodes: int, frames: tuple[int, int],
                  height: int, width: int) -> list[Episode]:
    """The content of a dataset: the action is the next step of the trajectory the state follows."""
    rng = np.random.default_rng([seed, task_position])
    lengths = rng.integers(frames[0], frames[1] + 1, size=episodes)
    keys = [k for k, w in robot.columns.state_layout for _ in range(w)]
    action_keys = [k for k, w in robot.columns.action_layout for _ in range(w)]
    widest = max(len(keys), len(action_keys))
    binary = sorted({i for i, k in enumerate(keys) if "gripper" in k} | {i for i, k in enumerate(action_keys)
                                                                         if "gripper" in k})
    content = []
    for length in lengths:
        path = trajectory(rng, int(length), widest, binary)
        state = path[:, : len(keys)]
        action = np.concatenate([path[1:], path[-1:]])[:, : len(action_keys)]  # the last step holds still
        views = {cam: np.stack([render_frame(view, s, task_position, height, width) for s in state])
                 for cam, view in robot.views.items()}
        content.append(Episode(state, action, views))
    return content


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
    for name, _, _ in items:  # all checked before any is written: each replaced is one this tool wrote
        check_out(out / name, folder=True, owned=out / name)
        check_replaceable(out / name, TOOL, overwrite=overwrite)
    storage = Storage(version=version, images=images, episodes_per_file=episodes_per_file, modality=modality, fps=fps,
                      gop=gop, codec="png" if images else video_codec())
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for position, (name, robot, instruction) in enumerate(items):
        content = make_episodes(robot, position, seed=seed, episodes=episodes, frames=frames, height=height,
                                width=width)
        written.append(write_dataset(out / name, robot.columns, content, instruction, storage, TOOL))
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
    parser.add_argument("--overwrite", action="store_true", help="replace dataset folders this tool wrote "
                        "before (never one it did not write)")


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
