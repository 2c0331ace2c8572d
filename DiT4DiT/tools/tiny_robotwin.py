"""Write a small synthetic dataset in RoboTwin's LeRobot v2.1 layout, deterministic from a seed.

The RoboTwin case of `DiT4DiT.tools.tiny_dataset`: task folders named after RoboTwin tasks, three cameras,
14-dim state and action (action = next state) stored in StarVLA's raw order [L6, Lg, R6, Rg], and cameras
that follow particular joints and the grippers.

    python -m DiT4DiT.tools.tiny_robotwin --out playground/Datasets/robotwin_tiny
    (the same as: python -m DiT4DiT.tools.tiny_dataset --data_mix robotwin --datasets 3 --out ..., but with
    the three tasks below and RoboTwin's instructions)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import DATA_TOOLS, require
    require("python -m DiT4DiT.tools.tiny_robotwin", DATA_TOOLS)

import numpy as np

from DiT4DiT.facts import TINY_DATA_DIR
from DiT4DiT.tools import tiny_dataset
from DiT4DiT.tools.tiny_dataset import Camera, robot_for

DEFAULT_OUT = Path(TINY_DATA_DIR)
DEFAULT_TASKS = ("adjust_bottle", "place_a2b_left", "place_a2b_right")
INSTRUCTIONS = {
    "adjust_bottle": "Pick up the bottle on the table and set it upright.",
    "place_a2b_left": "Place object A to the left of object B.",
    "place_a2b_right": "Place object A to the right of object B.",
}
CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")
# Raw order [L6 joints, L gripper, R6 joints, R gripper], as StarVLA's RoboTwin modality.json slices it.
RAW_LAYOUT = (("left_joints", 6), ("left_gripper", 1), ("right_joints", 6), ("right_gripper", 1))
# What each camera shows: (x joint, y joint, gripper) indices into the 14-dim state, and the blob's base colour.
CAMERA_VIEW = {
    "cam_high": Camera((0, 7, 6), (230, 60, 40)),
    "cam_left_wrist": Camera((1, 2, 6), (40, 200, 70)),
    "cam_right_wrist": Camera((8, 9, 13), (50, 90, 230)),
}
ROBOT = robot_for("robotwin", state_layout=RAW_LAYOUT, action_layout=RAW_LAYOUT, views=CAMERA_VIEW)


def render_frame(camera: str, state: np.ndarray, task_position: int, height: int, width: int) -> np.ndarray:
    """(height, width, 3) uint8 image of one RoboTwin camera for one 14-dim state."""
    return tiny_dataset.render_frame(CAMERA_VIEW[camera], state, task_position, height, width)


def generate(out: str | Path = DEFAULT_OUT, *, seed: int = 0, tasks=DEFAULT_TASKS, episodes: int = 3,
             frames: tuple[int, int] = (24, 40), fps: int = 15, height: int = 48, width: int = 64, gop: int = 10,
             overwrite: bool = False) -> list[Path]:
    """Write one dataset folder per task under `out`; each appears whole (built aside, then moved in)."""
    items = [(task, ROBOT, INSTRUCTIONS.get(task, task.replace("_", " "))) for task in tasks]
    return tiny_dataset.write_folders(Path(out), items, overwrite=overwrite, seed=seed, episodes=episodes,
                                      frames=frames, fps=fps, height=height, width=width, gop=gop, version="v2.1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder that receives one folder per task")
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="RoboTwin task names (folder names)")
    tiny_dataset.add_size_arguments(parser)
    args = parser.parse_args(argv)
    return tiny_dataset.run_cli("tiny_robotwin", lambda: generate(args.out, tasks=args.tasks,
                                                                  **tiny_dataset.size_settings(args)))


if __name__ == "__main__":
    sys.exit(main())
