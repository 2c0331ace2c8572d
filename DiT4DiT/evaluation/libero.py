"""LIBERO through the policy server: observations -> requests, whole action chunks executed in order, success rates.

    python -m DiT4DiT.evaluation.libero --port 10093 --task_suite libero_spatial --num_trials_per_task 50 \
        --out results/libero [--tasks 0,3] [--max_steps 220] [--fast_render] [--num_envs 4]

Runs in `.venv-libero` (`make libero-env`; no torch there) next to a running `python -m DiT4DiT.serving.server`,
and renders headless (MUJOCO_GL=egl, else osmesa). OUT gets, as each task finishes, `<suite>__<task>.result.json`
and the original's layout: `eval_libero_<suite>.log` (the lines its utils/calculate_libero_success_rate.py reads)
and `rollout_<task>_episode<i>_<success|failure>.mp4`; at the end `summary.json` (the Meta-World adapter's
format), `success_rate_summary.json` / `.txt` and `frames.png`.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from DiT4DiT.errors import run_main
from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.evaluation.closed_loop_report import strip_frames
from DiT4DiT.evaluation.metaworld import select_gl_backend
from DiT4DiT.evaluation.parallel import blocks, check_num_envs, run_episodes
from DiT4DiT.evaluation.server_policy import ChunkedPolicy, connect, server_address
from DiT4DiT.evaluation.summary import render, summarize, write_task_result
from DiT4DiT.logging_setup import configure_logging

log = logging.getLogger("dit4dit.libero")

# Longest training demonstration of each suite plus a margin (the original's budgets).
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
DUMMY_ACTION = [0.0] * 6 + [-1.0]  # hold still, gripper open, while objects settle
ENV_RESOLUTION = 256
VIDEO_FPS = 10  # the original's replay videos


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


class LiberoPolicy(ChunkedPolicy):
    """The served chunks as LIBERO env actions."""

    def __init__(self, client):
        super().__init__(client)
        if self.action_dim < 7:
            raise SimulatorError(f"the served model returns {self.action_dim}-dim actions; LIBERO needs 7 (6 deltas + "
                                 "gripper): serve a model trained on the libero_franka layout")

    def act(self, views: list[np.ndarray], state: np.ndarray, instruction: str) -> list[float]:
        """The env action for this step: 6 deltas and the gripper (-1 open, +1 close, LIBERO's convention)."""
        action = np.asarray(self.next_row(views, state, instruction), dtype=np.float64)
        gripper = 1.0 - 2.0 * float(action[6] > 0.5)  # trained as 1 = open; LIBERO takes -1 = open
        return [*action[:6].tolist(), gripper]


def run_libero_task(policy: LiberoPolicy, env, instruction: str, init_states, trials: Iterable[int], max_steps: int,
                    num_steps_wait: int = 10, on_trial: Callable | None = None, keep_frames: int = 0, *,
                    task_key: tuple[int, int]) -> list[bool]:
    """Outcomes of the given trials of one task: trial i starts from init_states[i], waits, then follows the policy.

    task_key is (the run's seed, the task id): trial i's requests are seeded from (*task_key, i) and the step, so
    they draw the same noise in a serial run as in any process of a parallel one.

    `on_trial(trial, success, policy steps taken, agent-view frames)` sees each trial as it ends, with frames for
    trials below `keep_frames` only.
    """
    outcomes = []
    for trial in trials:
        policy.reset((*task_key, trial))
        env.reset()
        obs = env.set_init_state(init_states[trial])
        done, steps, frames, started = False, 0, [], time.monotonic()
        for t in range(max_steps + num_steps_wait):
            if t < num_steps_wait:
                obs, _, done, _ = env.step(DUMMY_ACTION)
                continue
            views, state = libero_observation(obs)
            if trial < keep_frames:
                frames.append(views[0])
            obs, _, done, _ = env.step(policy.act(views, state, instruction))
            steps += 1
            if done:
                break
        outcomes.append(bool(done))
        log.info("task %r trial %d: %s in %d steps (%.1f s from the initial state)", instruction, trial,
                 "success" if done else "failure", steps, time.monotonic() - started)
        if on_trial is not None:
            on_trial(trial, bool(done), steps, frames)
    return outcomes


class FastRendering:
    """A LIBERO env whose renders skip shadows, reflections and off-screen multisampling (software GL spends most
    of a frame on them). Every reset loads a new model and render context, so each reset applies it again."""

    def __init__(self, env):
        self.env = env

    def reset(self):
        import mujoco

        result = self.env.reset()
        sim = self.env.env.sim
        sim.model._model.vis.quality.shadowsize = 0
        sim.model._model.vis.quality.offsamples = 0
        context = sim._render_context_offscreen
        context.con.free()
        context._set_mujoco_context_and_buffers()  # the buffers read offsamples when they are made
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            context.scn.flags[flag] = False
        return result

    def __getattr__(self, name):
        return getattr(self.env, name)


class ResultLog:
    """eval_libero_<suite>.log in the original's wording, which utils/calculate_libero_success_rate.py parses."""

    def __init__(self, out: Path, suite: str):
        self.path = Path(out) / f"eval_libero_{suite}.log"
        self.path.write_text("")

    def line(self, message: str) -> None:
        with self.path.open("a") as handle:
            handle.write(f"{datetime.now():%Y-%m-%d %H:%M:%S} INFO {message}\n")


def write_video(path: Path, frames: list[np.ndarray]) -> None:
    import imageio

    imageio.mimwrite(path, frames, fps=VIDEO_FPS)


def libero_simulator():
    """(benchmark, get_libero_path, OffScreenRenderEnv) from the installed LIBERO, or a SimulatorError saying how."""
    select_gl_backend()
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as error:
        raise SimulatorError(f"the LIBERO simulator is not importable ({error}); build its environment with "
                             "`make libero-env` and run this with .venv-libero/bin/python") from None
    return benchmark, get_libero_path, OffScreenRenderEnv


def task_ids(spec: str | None, n_tasks: int, suite: str) -> list[int]:
    if not spec:
        return list(range(n_tasks))
    try:
        ids = [int(part) for part in spec.split(",") if part]
    except ValueError:
        raise BadArgument(f"--tasks {spec!r}: give task numbers, e.g. 0,3") from None
    wrong = [i for i in ids if not 0 <= i < n_tasks]
    if wrong or not ids:
        raise BadArgument(f"--tasks {spec!r}: {suite} has tasks 0..{n_tasks - 1}")
    return ids


@dataclass(frozen=True)
class LiberoRun:
    """What every environment process of an evaluation needs. Episode e is trial e % trials of task
    tasks[e // trials]."""

    suite: str
    tasks: tuple[int, ...]
    trials: int
    max_steps: int
    num_steps_wait: int
    seed: int
    videos: int
    fast_render: bool
    server: str
    wait_s: float
    out: str


def video_name(instruction: str, trial: int, won: bool) -> str:
    return f"rollout_{instruction.replace(' ', '_')}_episode{trial}_{'success' if won else 'failure'}.mp4"


def run_libero_episodes(run: LiberoRun, episodes: list[int], report) -> None:
    """One environment process: its own simulator and server connection; report(e, result) after each episode.

    A serial run seeds a task's env once and resets it before every trial, and the seed's stream moves with each
    reset (it moves objects even from a fixed initial state). A process starting a task at trial k therefore resets
    its fresh env k times first, so that trial k starts from the state it has in a serial run.
    """
    benchmark, get_libero_path, OffScreenRenderEnv = libero_simulator()
    suite = benchmark.get_benchmark_dict()[run.suite]()
    client = connect(run.server, run.wait_s)
    np.random.seed(run.seed)
    try:
        policy = LiberoPolicy(client)
        for position, group in itertools.groupby(episodes, key=lambda e: e // run.trials):
            trials = [e % run.trials for e in group]
            task = suite.get_task(run.tasks[position])
            bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
            env = OffScreenRenderEnv(bddl_file_name=str(bddl), camera_heights=ENV_RESOLUTION,
                                     camera_widths=ENV_RESOLUTION)
            env.seed(run.seed)  # the seed moves objects even from a fixed initial state
            if run.fast_render:
                env = FastRendering(env)

            sent = len(policy.latencies_s)

            def done(trial: int, won: bool, steps: int, frames: list) -> None:
                nonlocal sent
                if frames:  # the process writes its videos: whole episodes are too large to send
                    write_video(Path(run.out) / video_name(task.language, trial, won), frames)
                asked, sent = policy.latencies_s[sent:], len(policy.latencies_s)
                report(position * run.trials + trial, {"success": won, "steps": steps, "strip": strip_frames(frames),
                                                       "latencies_s": asked})

            try:
                for _ in range(trials[0]):
                    env.reset()
                run_libero_task(policy, env, task.language, suite.get_task_init_states(run.tasks[position]), trials,
                                run.max_steps, run.num_steps_wait, on_trial=done, keep_frames=run.videos,
                                task_key=(run.seed, run.tasks[position]))
            finally:
                env.close()
    finally:
        client.close()


class TaskLog:
    """Writes each task's result files (and the original's log lines) once it and every task before it are done,
    in task order, whichever process finished its episodes first."""

    def __init__(self, out: Path, run: LiberoRun, languages: list[str]):
        self.out, self.run, self.languages = out, run, languages
        self.result_log = ResultLog(out, run.suite)
        self.results: dict[int, dict] = {}
        self.written = 0  # tasks written so far
        self.outcomes: list[bool] = []

    def add(self, episode: int, result: dict) -> None:
        self.results[episode] = result
        trials = self.run.trials
        while self.written < len(self.languages) and all(
                e in self.results for e in range(self.written * trials, (self.written + 1) * trials)):
            language = self.languages[self.written]
            task_outcomes = [self.results[e]["success"] for e in range(self.written * trials, (self.written + 1) * trials)]
            self.outcomes += task_outcomes
            self.result_log.line(f"Task: {language}")
            write_task_result(self.out, self.run.suite, language, task_outcomes)
            self.result_log.line(f"Current task success rate: {sum(task_outcomes) / len(task_outcomes)}")
            self.result_log.line(f"Current total success rate: {sum(self.outcomes) / len(self.outcomes)}")
            self.written += 1


def evaluate(suite_name: str, trials: int, out: Path, *, host: str, port: int, tasks: str | None = None,
             max_steps: int | None = None, num_steps_wait: int = 10, seed: int = 7, videos: int = 1,
             fast_render: bool = False, wait_s: float = 10.0, num_envs: int = 1) -> dict:
    """Run `trials` episodes of each chosen task of one suite over `num_envs` environment processes; write the
    result files into out, return summary.json."""
    from DiT4DiT.evaluation.closed_loop_report import write_frame_strip, write_summary

    if suite_name not in MAX_STEPS:
        close = difflib.get_close_matches(suite_name, list(MAX_STEPS), n=1)
        raise BadArgument(f"--task_suite {suite_name!r} is not a LIBERO suite; use one of {', '.join(MAX_STEPS)}"
                          + (f" (closest: {close[0]})" if close else ""))
    if trials < 1:
        raise BadArgument(f"--num_trials_per_task {trials}: run at least 1 episode per task")
    if not 0 <= seed < 2**32:  # numpy's global seed; the requests' noise seeds are made from it too
        raise BadArgument(f"--seed {seed}: give an integer in 0..{2**32 - 1}")
    server = f"{host}:{port}"
    server_address(server)
    benchmark, _, _ = libero_simulator()
    suite = benchmark.get_benchmark_dict()[suite_name]()
    chosen = task_ids(tasks, suite.n_tasks, suite_name)
    for task_id in chosen:
        if trials > len(suite.get_task_init_states(task_id)):
            raise BadArgument(f"--num_trials_per_task {trials}: {suite_name} task {task_id} has "
                              f"{len(suite.get_task_init_states(task_id))} initial states")
    processes = check_num_envs(num_envs, trials * len(chosen))
    budget = MAX_STEPS[suite_name] if max_steps is None else max_steps
    connect(server, wait_s).close()  # no server: one line before any simulator starts
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run = LiberoRun(suite_name, tuple(chosen), trials, budget, num_steps_wait, seed, videos, fast_render, server,
                    wait_s, str(out))
    languages = [suite.get_task(task_id).language for task_id in chosen]
    task_log = TaskLog(out, run, languages)
    # Process p runs block p of every task's trials: each env is made once per task and process, and replays at
    # most `trials` resets. With more processes than trials, the blocks are cut from all episodes instead.
    if processes <= trials:
        per_process = [[position * trials + trial for position in range(len(chosen)) for trial in block]
                       for block in blocks(trials, processes)]
    else:
        per_process = [list(block) for block in blocks(trials * len(chosen), processes)]
    started = time.monotonic()
    done = run_episodes(run_libero_episodes, run, per_process, on_result=task_log.add,
                        describe=lambda e: f"{e % trials} of task {chosen[e // trials]}")
    results = [done.results[e] for e in range(trials * len(chosen))]
    outcomes = task_log.outcomes
    task_log.result_log.line(f"Total success rate: {sum(outcomes) / len(outcomes)}")
    task_log.result_log.line(f"Total episodes: {len(outcomes)}")
    summary = write_summary(out, suite_name, ",".join(map(str, chosen)), outcomes, [r["steps"] for r in results],
                            latencies_s=[s for r in results for s in r["latencies_s"]],
                            wall_s=time.monotonic() - started, policy="server", server=server, max_steps=budget,
                            image_size=ENV_RESOLUTION, seed=seed, trials_per_task=trials, fast_render=fast_render,
                            num_envs=processes, retried_episodes=done.retried)
    summarize(out)
    strips = [r["strip"] for r in results if r["strip"]][:3]
    if strips:
        write_frame_strip(out / "frames.png", strips)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.evaluation.libero", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10093)
    parser.add_argument("--task_suite", default="libero_spatial", help=", ".join(MAX_STEPS))
    parser.add_argument("--tasks", help="task numbers of the suite to run, e.g. 0,3 (default: all)")
    parser.add_argument("--num_trials_per_task", type=int, default=50)
    parser.add_argument("--max_steps", type=int, help="policy steps per episode (default: the suite's budget)")
    parser.add_argument("--num_steps_wait", type=int, default=10, help="steps holding still while objects settle")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--videos", type=int, default=1, help="episodes per task saved as rollout videos")
    parser.add_argument("--fast_render", action="store_true",
                        help="no shadows, reflections or multisampling: faster on software GL, images differ slightly")
    parser.add_argument("--wait_s", type=float, default=10.0, help="how long to wait for the server to accept")
    parser.add_argument("--num_envs", type=int, default=1,
                        help="environment processes, each with its own simulator and server connection; every task's "
                             "trials are split into contiguous blocks, and the results are those of --num_envs 1")
    parser.add_argument("--out", type=Path, required=True, help="folder for per-task results and the summary")
    args = parser.parse_args(argv)
    configure_logging()
    return run_main(lambda: evaluate_suite(args))


def evaluate_suite(args: argparse.Namespace) -> None:
    summary = evaluate(args.task_suite, args.num_trials_per_task, args.out, host=args.host, port=args.port,
                       tasks=args.tasks, max_steps=args.max_steps, num_steps_wait=args.num_steps_wait,
                       seed=args.seed, videos=args.videos, fast_render=args.fast_render, wait_s=args.wait_s,
                       num_envs=args.num_envs)
    print(render(summarize(args.out)), end="")
    low, high = summary["ci95"]
    print(f"{args.task_suite}: {summary['successes']}/{summary['episodes']} = {summary['success_rate']:.0%} "
          f"(95% interval {low:.0%}-{high:.0%}) -> {args.out}/summary.json")


if __name__ == "__main__":
    sys.exit(main())
