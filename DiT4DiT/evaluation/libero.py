"""LIBERO through the policy server: observations -> requests, whole action chunks executed in order, success rates.

    python -m DiT4DiT.evaluation.libero --port 10093 --out results/libero [--task_suites libero_spatial,libero_goal]

needs the LIBERO simulator (not part of this repository's requirements) and a running
`python -m DiT4DiT.serving.server`. Every task writes its result as it finishes; the summary
(`success_rate_summary.json` / `.txt`) is written at the end (`python -m DiT4DiT.evaluation.summary` redoes it).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

import numpy as np

from DiT4DiT.evaluation.observations import StateEncoder, side_by_side_views
from DiT4DiT.evaluation.summary import render, summarize, write_task_result
from DiT4DiT.logging_setup import configure_logging

log = logging.getLogger("dit4dit.libero")

# Longest training demonstration of each suite plus a margin (the original's budgets).
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
DUMMY_ACTION = [0.0] * 6 + [-1.0]  # hold still, gripper open, while objects settle
ENV_RESOLUTION = 256


def quaternion_to_axis_angle(quat) -> np.ndarray:
    """(x, y, z, w) unit quaternion -> axis * angle (3,), zero for a zero rotation."""
    x, y, z, w = (float(v) for v in quat)
    w = min(1.0, max(-1.0, w))
    sin_half = math.sqrt(1.0 - w * w)
    if math.isclose(sin_half, 0.0):
        return np.zeros(3)
    return np.array([x, y, z]) * 2.0 * math.acos(w) / sin_half


def libero_observation(obs: dict) -> tuple[list[np.ndarray], np.ndarray]:
    """([agent view, wrist view] rotated 180 degrees as in training, raw state: eef pos, axis-angle, gripper qpos)."""
    views = [np.ascontiguousarray(obs[key][::-1, ::-1]) for key in ("agentview_image", "robot0_eye_in_hand_image")]
    state = np.concatenate([obs["robot0_eef_pos"], quaternion_to_axis_angle(obs["robot0_eef_quat"]),
                            obs["robot0_gripper_qpos"]])
    return views, state


class LiberoPolicy:
    """Queries the server every `action_chunk` steps and executes that chunk's rows one per step."""

    def __init__(self, client):
        self.client = client
        meta = client.metadata
        self.size, self.chunk = int(meta["image_size"]), int(meta["action_chunk"])
        self.encode_state = StateEncoder(meta) if int(meta["state_dim"]) else None
        self._actions: np.ndarray | None = None
        self._step = 0

    def reset(self) -> None:
        self._actions, self._step = None, 0

    def act(self, views: list[np.ndarray], state: np.ndarray, instruction: str) -> list[float]:
        """The env action for this step: 6 deltas and the gripper (-1 open, +1 close, LIBERO's convention)."""
        if self._step % self.chunk == 0:
            example = {"image": [side_by_side_views(views, self.size)], "lang": instruction}
            if self.encode_state is not None:
                example["state"] = self.encode_state(state)
            self._actions = self.client.infer([example])["actions"][0]
        action = np.asarray(self._actions[self._step % self.chunk], dtype=np.float64)
        self._step += 1
        if action.size < 7:
            raise ValueError(f"the served model returns {action.size}-dim actions; LIBERO needs 7 (6 deltas + gripper)")
        gripper = 1.0 - 2.0 * float(action[6] > 0.5)  # trained as 1 = open; LIBERO takes -1 = open
        return [*action[:6].tolist(), gripper]


def run_libero_task(policy: LiberoPolicy, env, instruction: str, init_states, trials: int, max_steps: int,
                    num_steps_wait: int = 10) -> list[bool]:
    """Episode outcomes of one task: each starts from init_states[i], waits, then follows the policy."""
    outcomes = []
    for trial in range(trials):
        policy.reset()
        env.reset()
        obs = env.set_init_state(init_states[trial])
        done = False
        for t in range(max_steps + num_steps_wait):
            if t < num_steps_wait:
                obs, _, done, _ = env.step(DUMMY_ACTION)
                continue
            views, state = libero_observation(obs)
            obs, _, done, _ = env.step(policy.act(views, state, instruction))
            if done:
                break
        outcomes.append(bool(done))
        log.info("task %r trial %d: %s", instruction, trial, "success" if done else "failure")
    return outcomes


def _libero_suites():
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as error:
        raise SystemExit(f"error: the LIBERO simulator is not importable ({error}); install LIBERO "
                         "(github.com/Lifelong-Robot-Learning/LIBERO) and put it on PYTHONPATH") from None
    return benchmark, get_libero_path, OffScreenRenderEnv


def main(argv: list[str] | None = None) -> int:
    from DiT4DiT.serving.client import PolicyClient

    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.evaluation.libero", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10093)
    parser.add_argument("--task_suites", default="libero_spatial,libero_object,libero_goal,libero_10")
    parser.add_argument("--num_trials_per_task", type=int, default=50)
    parser.add_argument("--num_steps_wait", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", required=True, help="folder for per-task results and the summary")
    args = parser.parse_args(argv)
    configure_logging()
    suites = [s for s in args.task_suites.split(",") if s]
    unknown = [s for s in suites if s not in MAX_STEPS]
    if unknown:
        print(f"error: unknown task suite(s) {unknown}; known: {sorted(MAX_STEPS)}", file=sys.stderr)
        return 2
    benchmark, get_libero_path, OffScreenRenderEnv = _libero_suites()
    np.random.seed(args.seed)
    with PolicyClient(args.host, args.port) as client:
        policy = LiberoPolicy(client)
        for suite_name in suites:
            suite = benchmark.get_benchmark_dict()[suite_name]()
            for task_id in range(suite.n_tasks):
                task = suite.get_task(task_id)
                bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
                env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=ENV_RESOLUTION,
                                         camera_widths=ENV_RESOLUTION)
                env.seed(args.seed)  # the seed moves objects even from a fixed initial state
                outcomes = run_libero_task(policy, env, task.language, suite.get_task_init_states(task_id),
                                           args.num_trials_per_task, MAX_STEPS[suite_name], args.num_steps_wait)
                env.close()
                write_task_result(Path(args.out), suite_name, task.language, outcomes)
    print(render(summarize(Path(args.out))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
