"""Meta-World in closed loop: scripted-expert demonstrations as a LeRobot dataset, success rates through the server.

    python -m DiT4DiT.evaluation.metaworld collect --task handle-press-v3 --episodes 50 --out DATA_ROOT
    bash scripts/train_8p.sh --data_mix=DATA_ROOT/metaworld_handle-press-v3_demos --data_config=libero_franka
    python -m DiT4DiT.evaluation.metaworld evaluate --server 127.0.0.1:10093 --task handle-press-v3 --episodes 50 --out DIR
    python -m DiT4DiT.evaluation.metaworld evaluate --policy zero --task handle-press-v3 --episodes 50 --out DIR
    ... evaluate ... --num_envs 4     # four simulator processes, the same per-episode results
    ... evaluate ... --execution rtc --inference_delay 4   # the next chunk computed while 4 steps execute

Runs in `.venv-metaworld` (`make sim-env`; no torch there) and renders headless (MUJOCO_GL=egl, else osmesa).
The dataset goes to DATA_ROOT/metaworld_<task>_demos, a dataset of its own that training reads by path with the
`libero_franka` data config (its Franka state and action keys), in this layout (one value per key):
  state  x y z        hand position (m)
         roll pitch yaw   position of the task's first object (m): Meta-World's hand does not rotate
         pad          0
         gripper      finger opening, 0 (closed) .. 1 (open)
  action x y z        hand displacement, -1..1 (times 1 cm per step)
         roll pitch yaw   0
         gripper      grip effort, -1 (open) .. 1 (close)
  video  primary_image, wrist_image = the two --cameras (default "corner" turned upright, "gripperPOV")
The goal position is never in the state: on tasks such as reach-v3 only the cameras show it (at 32 px only with
--cameras across,topview --goal_marker 0.04), and with --hand_start the hand's start varies too, so that its
position alone does not betray the way to the goal. --goal_set K (reach-v3) draws the goal from K corners of its
box instead of anywhere in it: a coarse choice the images show plainly and a blind policy gets right at most 1 in K.
Evaluate with the scene options the demos were collected with.
Episode i of a run uses seed --seed + i: collect's default seeds (0..) and evaluate's (1000..) never meet, so an
evaluation runs on configurations the demonstrations never showed.
"""

from __future__ import annotations

import argparse
import ctypes.util
import difflib
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from DiT4DiT.errors import run_main
from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.evaluation.parallel import blocks, check_num_envs, run_episodes
from DiT4DiT.evaluation.server_policy import ChunkedPolicy, Execution, connect, server_address
from DiT4DiT.logging_setup import configure_logging

if TYPE_CHECKING:  # imported where collect runs: the writer brings pandas and pyarrow
    from DiT4DiT.dataloader.writer import Episode

log = logging.getLogger("dit4dit.metaworld")

SUITE = "metaworld"
DATA_CONFIG = "libero_franka"
VIEWS = ("primary_image", "wrist_image")  # the dataset's cameras, in the order `--cameras` names them
DEFAULT_CAMERAS = ("corner", "gripperPOV")
# Our own camera besides Meta-World's named ones: the working area seen from across the table, so a goal in front
# of the hand (reach-v3's) is never behind the arm. (lookat (m), distance (m), azimuth, elevation (degrees))
FREE_CAMERAS = {"across": ((0.0, 0.75, 0.12), 0.75, -90.0, -35.0)}
GOAL_MARKER_RGBA = (0.0, 1.0, 0.0, 1.0)  # green: Meta-World's dark red goal is lost against the red arm
ENV_ACTION_DIM = 4  # dx, dy, dz, grip
# Tasks whose goal is a free point the hand reaches, and whose success test reads the env's `_target_pos`: the
# tasks where --goal_set may move the goal.
GOAL_SET_TASKS = ("reach-v3",)
DATASET_FPS = 20
COLLECTOR = "metaworld collect"  # the .written_by of its datasets: its --overwrite replaces only those
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 16, 480  # the smallest video size; Meta-World's models allow 640 x 480 off screen
MAX_SEED = 2**32 - 1  # Meta-World seeds numpy with it


def select_gl_backend() -> str:
    """MUJOCO_GL for headless rendering, read by mujoco when it is imported: the user's, else EGL, else OSMesa."""
    if "MUJOCO_GL" not in os.environ:
        os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "osmesa"
    if os.environ["MUJOCO_GL"] == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL logs at INFO that an optional module is absent
    return os.environ["MUJOCO_GL"]


def task_names() -> list[str]:
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    return list(ALL_V3_ENVIRONMENTS)


def dataset_name(task: str) -> str:
    """The folder collect writes a task's demonstrations to, under its --out."""
    return f"metaworld_{task}_demos"


def training_options(folder: Path) -> list[str]:
    """The launcher options that train on the demonstrations in `folder`: the dataset by path, read as a Franka."""
    return [f"--data_mix={folder}", f"--data_config={DATA_CONFIG}"]


def instruction_of(task: str) -> str:
    """The task's instruction: its name in words ("handle-press-v3" -> "handle press")."""
    return task.rsplit("-v", 1)[0].replace("-", " ")


@dataclass(frozen=True)
class SceneSetup:
    """What a scene shows and where its hand starts; evaluate must be given what collect was (summary.json has it).

    `cameras` are Meta-World camera names or FREE_CAMERAS keys. goal_marker > 0 draws the task's target sites green
    with that radius (m), which only changes the pictures: sites have no physics and success is measured from the
    positions. hand_start > 0 starts the hand anywhere in a cube of that half-width (m) around Meta-World's fixed
    start, drawn from the seed: from a fixed start the hand's position alone tells the direction it has taken,
    so a policy that cannot see the goal can still follow an expert's straight line to it. goal_set K > 0 (1-4, on
    GOAL_SET_TASKS) puts the goal on one of the first K corners of the task's goal box (`goal_corners`), drawn from
    the seed.
    """

    image_size: int = 64
    cameras: tuple[str, str] = DEFAULT_CAMERAS
    goal_marker: float = 0.0
    hand_start: float = 0.0
    goal_set: int = 0

    def __post_init__(self):
        if not MIN_IMAGE_SIZE <= self.image_size <= MAX_IMAGE_SIZE:
            raise BadArgument(f"--image_size {self.image_size}: render {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} pixels "
                              "(Meta-World's off-screen buffer)")
        for name in ("goal_marker", "hand_start"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise BadArgument(f"--{name} {value}: give a distance in m, 0 or more")


def goal_corners(goal_space) -> np.ndarray:
    """(4, 3): the corners of a goal box in x and z, at the middle of its y, diagonal pairs first (K = 2 takes
    the two farthest apart). The box's other corners differ from these in depth, which the views show least."""
    (x0, y0, z0), (x1, y1, z1) = goal_space.low, goal_space.high
    y = (y0 + y1) / 2
    return np.array([[x0, y, z0], [x1, y, z1], [x0, y, z1], [x1, y, z0]], dtype=np.float64)


class Scene:
    """One Meta-World task with the goal observable (its scripted expert needs it), rendered by two cameras.

    `reset(seed)` draws the configuration from that seed alone, so a seed names one configuration.
    """

    def __init__(self, task: str, setup: SceneSetup):
        select_gl_backend()
        import mujoco
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
        from metaworld.policies import ENV_POLICY_MAP

        if task not in ALL_V3_ENVIRONMENTS:
            close = difflib.get_close_matches(task, list(ALL_V3_ENVIRONMENTS), n=3)
            raise BadArgument(f"--task {task!r} is not a Meta-World v3 task; closest: {', '.join(close) or 'none'} "
                              f"(all {len(ALL_V3_ENVIRONMENTS)}: python -m DiT4DiT.evaluation.metaworld tasks)")
        self.task = task
        env = ALL_V3_ENVIRONMENTS[task]()
        # What metaworld's goal-observable classes set up, without their fixed configuration.
        env._partially_observable = False
        del env.sawyer_observation_space  # a cached bound that would clip the goal to zero
        env._freeze_rand_vec = False
        # Draw the configuration from env.seed()'s generator: by default Meta-World draws it from numpy's global
        # one, so a seed did not name a configuration (a second reset with seed 1000 put reach-v3's goal 17 cm away).
        env.seeded_rand_vec = True
        env._set_task_called = True
        # Software GL spends most of a frame on shadows and multisampling; the policy does not need them.
        env.model.vis.quality.shadowsize = 0
        env.model.vis.quality.offsamples = 0
        self.env = env
        self.cameras = [self._camera(name, mujoco) for name in setup.cameras]
        self.setup = setup
        self.hand_home = np.array(env.hand_init_pos, dtype=np.float64)
        corners = goal_corners(env.goal_space)
        if not 0 <= setup.goal_set <= len(corners):
            raise BadArgument(f"--goal_set {setup.goal_set}: draw the goal from 1 to {len(corners)} corners of its "
                              "box, or 0 for anywhere in it")
        if setup.goal_set and task not in GOAL_SET_TASKS:
            raise BadArgument(f"--goal_set {setup.goal_set}: {task}'s goal is not a free point to reach; "
                              f"use it on {', '.join(GOAL_SET_TASKS)}, or 0")
        self.goal_positions = corners[:setup.goal_set]
        # The experts' gains exceed the action range on purpose; the clip below is what the env would do.
        warnings.filterwarnings("ignore", message="Constant.*may be too high", category=UserWarning)
        self.expert = ENV_POLICY_MAP[task]()
        try:
            self.renderer = mujoco.Renderer(env.model, setup.image_size, setup.image_size)
        except Exception as error:  # mujoco reports a missing GL as several exception types
            raise SimulatorError(f"cannot render with MUJOCO_GL={os.environ['MUJOCO_GL']} ({error}); install libegl1 "
                                 "or libosmesa6 (make sim-env names them), or set MUJOCO_GL") from None
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            self.renderer.scene.flags[flag] = False
        self.max_path_length = int(env.max_path_length)
        self.obs: np.ndarray | None = None

    def _camera(self, name: str, mujoco):
        if name in FREE_CAMERAS:
            lookat, distance, azimuth, elevation = FREE_CAMERAS[name]
            camera = mujoco.MjvCamera()
            camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            camera.lookat[:], camera.distance, camera.azimuth, camera.elevation = lookat, distance, azimuth, elevation
            return camera
        names = [self.env.model.camera(i).name for i in range(self.env.model.ncam)]
        if name not in names:
            raise BadArgument(f"--cameras: {name!r} is not a camera of {self.task}; use two of "
                              f"{', '.join(names + list(FREE_CAMERAS))}")
        return name

    def reset(self, seed: int) -> None:
        self.env.seed(seed)
        if self.setup.hand_start > 0:
            # A stream of its own ([seed, 1]): the env draws the configuration from `seed` itself.
            offset = np.random.default_rng([seed, 1]).uniform(-1.0, 1.0, size=3) * self.setup.hand_start
            self.env.hand_init_pos = self.hand_home + offset
        self.obs, _ = self.env.reset()
        if self.setup.goal_set:
            # Its own stream too ([seed, 2]). The success test reads _target_pos, the expert the observation, and
            # step()'s mj_forward places the goal site where the model has it (on reach-v3 relative to the world).
            corner = np.random.default_rng([seed, 2]).integers(self.setup.goal_set)
            self.env._target_pos = self.goal_positions[corner].copy()
            self.env.model.site("goal").pos = self.env._target_pos
            self.obs = self.env._get_obs()
        # reset() moves the target sites in the model only; step() puts them in the rendered data. Without this
        # an episode's first frame shows the previous configuration's goal.
        for name, position in self.env._target_site_config:
            self.env._set_pos_site(name, position)
            if self.setup.goal_marker > 0:
                site = self.env.model.site(name)
                site.size[0], site.rgba[:] = self.setup.goal_marker, GOAL_MARKER_RGBA

    def observation(self) -> np.ndarray:
        """The env's last observation (goal included)."""
        if self.obs is None:
            raise RuntimeError(f"{self.task}: no observation before the scene's first reset(seed)")
        return self.obs

    def state(self) -> np.ndarray:
        """(8,) in the dataset's state layout (module docstring)."""
        o = self.observation()
        return np.array([*o[0:3], *o[4:7], 0.0, o[3]], dtype=np.float32)

    def views(self) -> list[np.ndarray]:
        """[primary, wrist] (S, S, 3) uint8."""
        frames = []
        for camera in self.cameras:
            self.renderer.update_scene(self.env.data, camera=camera)
            frame = self.renderer.render()
            upright = isinstance(camera, str) and camera == "corner"  # Meta-World's corner camera is upside down
            frames.append(np.ascontiguousarray(frame[::-1, ::-1]) if upright else frame.copy())
        return frames

    def expert_action(self) -> np.ndarray:
        return np.clip(self.expert.get_action(self.observation()), -1.0, 1.0).astype(np.float32)

    def step(self, action: np.ndarray) -> bool:
        """Apply a (4,) env action; True once the task succeeded."""
        self.obs, _, _, _, info = self.env.step(np.asarray(action, dtype=np.float32))
        return bool(info["success"])

    def close(self) -> None:
        self.renderer.close()  # before interpreter exit: EGL refuses to free a context late
        self.env.close()


def dataset_action(env_action: np.ndarray) -> np.ndarray:
    """(4,) env action -> (7,) dataset action: x y z, three zero rotations, gripper."""
    return np.array([*env_action[:3], 0.0, 0.0, 0.0, env_action[3]], dtype=np.float32)


def env_action(dataset_row: np.ndarray) -> np.ndarray:
    """(7,) action in the dataset's layout (robot units) -> (4,) env action, clipped to the env's range."""
    row = np.asarray(dataset_row, dtype=np.float64)
    return np.clip(np.array([row[0], row[1], row[2], row[6]]), -1.0, 1.0).astype(np.float32)


# -- collect ---------------------------------------------------------------------------------------------------

def expert_episode(scene: Scene, seed: int, max_steps: int) -> Episode | None:
    """(states, actions, {camera: frames}) of one expert run, or None when it does not succeed in max_steps."""
    from DiT4DiT.dataloader.writer import Episode

    scene.reset(seed)
    states: list[np.ndarray] = []
    actions: list[np.ndarray] = []
    frames: dict[str, list[np.ndarray]] = {name: [] for name in VIEWS}
    for _ in range(max_steps):
        action = scene.expert_action()
        states.append(scene.state())
        actions.append(dataset_action(action))
        for name, view in zip(VIEWS, scene.views()):
            frames[name].append(view)
        if scene.step(action):
            return Episode(np.stack(states), np.stack(actions), {k: np.stack(v) for k, v in frames.items()})
    return None


def collect(task: str, episodes: int, out: Path, *, setup: SceneSetup = SceneSetup(), seed: int = 0,
            max_steps: int = 300, version: str = "v2.1", overwrite: bool = False) -> Path:
    """Write `episodes` successful expert episodes as the dataset out/dataset_name(task); returns that folder."""
    from DiT4DiT.dataloader import writer
    from DiT4DiT.host.output_paths import check_out, check_replaceable

    if episodes < 1:
        raise BadArgument(f"--episodes {episodes}: collect at least 1 episode")
    if version not in writer.LAYOUTS:
        raise BadArgument(f"--lerobot_version {version}: write one of {sorted(writer.LAYOUTS)}")
    if setup.image_size % 2:
        raise BadArgument(f"--image_size {setup.image_size}: videos need an even size")
    check_seeds(seed, 2 * episodes + 10)  # collect's most attempts
    at_least("--max_steps", max_steps, 1)
    target = Path(out) / dataset_name(task)
    check_out(target, folder=True, owned=target)
    check_replaceable(target, COLLECTOR, overwrite=overwrite)  # --overwrite: only a dataset this command wrote
    scene = Scene(task, setup)
    content: list[Episode] = []
    attempts, started = 0, time.monotonic()
    try:
        while len(content) < episodes:
            if attempts >= 2 * episodes + 10:
                raise SimulatorError(f"the {task} expert succeeded in only {len(content)} of {attempts} episodes "
                                     f"within {max_steps} steps; raise --max_steps")
            episode = expert_episode(scene, seed + attempts, max_steps)
            attempts += 1
            if episode is not None:
                content.append(episode)
    finally:
        scene.close()
    storage = writer.Storage(version=version, fps=DATASET_FPS, gop=10, codec=writer.video_codec())
    writer.write_dataset(target, writer.columns_for(DATA_CONFIG), content, instruction_of(task), storage,
                         COLLECTOR)
    lengths = [len(ep.state) for ep in content]
    log.info("%d %s demonstrations (%d attempts, %d-%d steps) in %.0f s -> %s", len(content), task, attempts,
             min(lengths), max(lengths), time.monotonic() - started, target)
    return target


# -- evaluate --------------------------------------------------------------------------------------------------

def at_least(option: str, value, low) -> None:
    if not (math.isfinite(value) and value >= low):
        raise BadArgument(f"{option} {value}: give a number of at least {low}")


def check_seeds(seed: int, episodes: int) -> None:
    if not 0 <= seed <= MAX_SEED - episodes:
        raise BadArgument(f"--seed {seed}: episodes use seeds SEED..SEED+{episodes - 1}, which must lie in "
                          f"0..{MAX_SEED}")


@dataclass
class ZeroPolicy:
    """Holds still with the gripper relaxed: the floor a trained policy must clear."""

    latencies_s: list[float] = field(default_factory=list)
    sees: bool = False  # whether act() looks at the views: rendering is most of a step's cost

    def reset(self, episode: tuple[int, ...]) -> None:
        pass

    def act(self, views, state, instruction) -> np.ndarray:
        return np.zeros(ENV_ACTION_DIM, dtype=np.float32)

    def seam_jumps(self) -> list[float]:
        return []  # no chunks

    def step_changes(self) -> list[float]:
        return []


class RandomPolicy(ZeroPolicy):
    """Uniform actions in the env's range, drawn from the episode's seed (a stream of its own, [seed, 3])."""

    def reset(self, episode: tuple[int, ...]) -> None:
        self.rng = np.random.default_rng([*episode, 3])

    def act(self, views, state, instruction) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, ENV_ACTION_DIM).astype(np.float32)


class ExpertPolicy(ZeroPolicy):
    """Meta-World's scripted expert, which reads the full observation (goal included): the ceiling, and a policy
    whose episodes depend on their seed alone."""

    def __init__(self, scene: "Scene"):
        super().__init__()
        self.scene = scene

    def act(self, views, state, instruction) -> np.ndarray:
        return self.scene.expert_action()


class ServerPolicy(ChunkedPolicy):
    """The served chunks as Meta-World env actions; while no row is there (sync with --inference_delay) the hand
    holds still and the gripper keeps its last effort."""

    def __init__(self, client, blank_images: bool = False, **execution):
        super().__init__(client, blank_images, **execution)
        if self.action_dim != 7:
            raise SimulatorError(f"the served model returns {self.action_dim}-dim actions; this adapter needs the 7 "
                                 f"of the {DATA_CONFIG} layout (train on data from `collect`)")
        self._held: np.ndarray = np.zeros(ENV_ACTION_DIM, dtype=np.float32)

    def reset(self, episode: tuple[int, ...]) -> None:
        super().reset(episode)  # the requests' noise seeds come from the episode and the step
        self._held = np.zeros(ENV_ACTION_DIM, dtype=np.float32)

    def act(self, views, state, instruction) -> np.ndarray:
        row = self.next_row(views, state, instruction)
        if row is None:
            return self._held
        action = env_action(row)
        self._held = np.array([0.0, 0.0, 0.0, action[3]], dtype=np.float32)
        return action


POLICIES = ("server", "zero", "random", "expert")
Policy = ZeroPolicy | ServerPolicy  # the baselines subclass ZeroPolicy


def run_episode(scene: Scene, policy: Policy, seed: int, max_steps: int,
                keep_frames: bool) -> tuple[bool, int, list[np.ndarray]]:
    """(success, steps taken, primary-camera frames if kept) of one episode, named (seed,) to the policy."""
    scene.reset(seed)
    policy.reset((seed,))
    instruction = instruction_of(scene.task)
    frames = []
    for step in range(1, max_steps + 1):
        views = scene.views() if policy.sees or keep_frames else None
        if keep_frames and views is not None:
            frames.append(views[0])
        if scene.step(policy.act(views, scene.state(), instruction)):
            return True, step, frames
    return False, max_steps, frames


@dataclass(frozen=True)
class EvaluationRun:
    """What every environment process of an evaluation needs; episode i uses seed + i."""

    task: str
    setup: SceneSetup
    policy: str
    server: str | None
    blank_images: bool
    seed: int
    max_steps: int
    videos: int
    wait_s: float
    execution: Execution = field(default_factory=Execution)  # how a served policy's chunks run

    def server_to_ask(self) -> str:
        """HOST:PORT of the served policy (evaluate refuses policy "server" without one)."""
        if self.server is None:
            raise RuntimeError(f"EvaluationRun: policy {self.policy!r} with no server to ask")
        return self.server


def run_episodes_here(run: EvaluationRun, episodes: list[int], report) -> None:
    """One environment process: its own scene and server connection; report(i, result) after each episode."""
    client = connect(run.server_to_ask(), run.wait_s) if run.policy == "server" else None
    scene = None
    try:
        scene = Scene(run.task, run.setup)
        policy: Policy
        if client is not None:
            policy = ServerPolicy(client, run.blank_images, **run.execution)
        elif run.policy == "expert":
            policy = ExpertPolicy(scene)
        else:
            policy = RandomPolicy() if run.policy == "random" else ZeroPolicy()
        for i in episodes:
            asked = len(policy.latencies_s)
            won, steps, frames = run_episode(scene, policy, run.seed + i, run.max_steps, keep_frames=i < run.videos)
            log.info("%s episode %d (seed %d): %s in %d steps", run.task, i, run.seed + i,
                     "success" if won else "failure", steps)
            report(i, {"success": won, "steps": steps, "frames": frames, "latencies_s": policy.latencies_s[asked:],
                       "seam_jumps": policy.seam_jumps(), "step_changes": policy.step_changes()})
    finally:
        if scene is not None:
            scene.close()
        if client is not None:
            client.close()


def evaluate(task: str, episodes: int, out: Path, *, policy_name: str = "server", server: str | None = None,
             blank_images: bool = False, setup: SceneSetup = SceneSetup(), seed: int = 1000, max_steps: int = 150,
             videos: int = 3, wait_s: float = 10.0, num_envs: int = 1, execution: str = "sync",
             inference_delay: int = 0, execution_horizon: int | None = None) -> dict:
    """Run the episodes over `num_envs` environment processes; write summary.json, the adapters' result files,
    outcomes.png and frames.png into out. `execution`, `inference_delay` and `execution_horizon`: how a served
    policy's chunks run (ChunkedPolicy)."""
    from DiT4DiT.evaluation.closed_loop_report import plot_outcomes, write_frame_strip, write_summary
    from DiT4DiT.evaluation.summary import summarize, write_task_result

    if episodes < 1:
        raise BadArgument(f"--episodes {episodes}: evaluate at least 1 episode")
    check_seeds(seed, episodes)
    at_least("--max_steps", max_steps, 1)
    at_least("--videos", videos, 0)
    at_least("--wait_s", wait_s, 0)
    processes = check_num_envs(num_envs, episodes)
    if policy_name == "server":
        if server is None:
            raise BadArgument("evaluate needs --server HOST:PORT, or --policy zero|random|expert for a baseline")
        server_address(server)  # a bad address is one line here, not one per environment process
    else:
        server = None
        if execution != "sync" or inference_delay:
            raise BadArgument(f"--execution {execution} --inference_delay {inference_delay}: chunks are executed for "
                              "--policy server only")
    if inference_delay < 0:
        raise BadArgument(f"--inference_delay {inference_delay}: give 0 or more policy steps")
    chunks = Execution(execution=execution, inference_delay=inference_delay, execution_horizon=execution_horizon)
    run = EvaluationRun(task, setup, policy_name, server, blank_images, seed, max_steps, videos, wait_s, chunks)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = run_episodes(run_episodes_here, run, [list(b) for b in blocks(episodes, processes)],
                        describe=lambda i: f"{i} (seed {seed + i})")
    wall = time.monotonic() - started
    results = [done.results[i] for i in range(episodes)]
    outcomes, lengths = [r["success"] for r in results], [r["steps"] for r in results]
    label = policy_name + (" (blank images)" if blank_images else "")
    jumps = [jump for r in results for jump in r["seam_jumps"]]
    changes = [change for r in results for change in r["step_changes"]]
    summary = write_summary(out, SUITE, task, outcomes, lengths, **chunks, **seam_summary(jumps, changes),
                            latencies_s=[s for r in results for s in r["latencies_s"]], wall_s=wall, policy=label,
                            server=server, max_steps=max_steps, image_size=setup.image_size,
                            seeds=[seed, seed + episodes - 1], cameras=list(setup.cameras),
                            goal_marker=setup.goal_marker, hand_start=setup.hand_start, goal_set=setup.goal_set,
                            num_envs=processes, retried_episodes=done.retried)
    write_task_result(out, SUITE, task, outcomes)
    summarize(out)
    plot_outcomes(out / "outcomes.png", outcomes, lengths, max_steps, f"{task}, {label}")
    strips = [r["frames"] for r in results if r["frames"]]
    if strips:
        write_frame_strip(out / "frames.png", strips)
    return summary


def seam_summary(jumps: list[float], changes: list[float]) -> dict:
    """The jumps between the last action run from one chunk and the first from the next (robot units, L2), and,
    for scale, the mean change between consecutive actions of one chunk."""
    return {"seams": len(jumps), "seam_jump_mean": float(np.mean(jumps)) if jumps else None,
            "seam_jump_max": float(np.max(jumps)) if jumps else None,
            "step_change_mean": float(np.mean(changes)) if changes else None}


def camera_pair(text: str) -> tuple[str, str]:
    names = tuple(name.strip() for name in text.split(","))
    if len(names) != 2 or not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: name two cameras, primary then wrist, e.g. corner,gripperPOV")
    return names


def add_scene_options(parser: argparse.ArgumentParser) -> None:
    """SceneSetup's fields, with its defaults; evaluate must be given what collect was."""
    default = SceneSetup()
    parser.add_argument("--image_size", type=int, default=default.image_size,
                        help="camera resolution, square (evaluate resizes views to the served model's image_size)")
    parser.add_argument("--cameras", type=camera_pair, default=default.cameras,
                        help=f"primary,wrist: Meta-World cameras or {', '.join(FREE_CAMERAS)} "
                             f"(default {','.join(default.cameras)})")
    parser.add_argument("--goal_marker", type=float, default=default.goal_marker,
                        help="draw the goal green with this radius in m (0: as Meta-World draws it)")
    parser.add_argument("--hand_start", type=float, default=default.hand_start,
                        help="start the hand anywhere within this distance in m of Meta-World's start, per axis (0: "
                             "its fixed start)")
    parser.add_argument("--goal_set", type=int, default=default.goal_set,
                        help=f"draw the goal from this many corners of its box (1-4; {', '.join(GOAL_SET_TASKS)}; 0: "
                             "anywhere in it)")


def scene_setup(args: argparse.Namespace) -> SceneSetup:
    return SceneSetup(args.image_size, args.cameras, args.goal_marker, args.hand_start, args.goal_set)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.evaluation.metaworld", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("collect", help="write successful scripted-expert episodes as a LeRobot dataset")
    c.add_argument("--task", required=True, help="Meta-World v3 task, e.g. handle-press-v3")
    c.add_argument("--episodes", type=int, required=True, help="successful episodes to write")
    c.add_argument("--out", type=Path, required=True, help=f"data root; the dataset goes to OUT/{dataset_name('TASK')}")
    add_scene_options(c)
    c.add_argument("--lerobot_version", default="v2.1", help="layout to write: v2.1 or v3.0")
    c.add_argument("--seed", type=int, default=0, help="episode i uses seed SEED + i")
    c.add_argument("--max_steps", type=int, default=300, help="longest expert episode kept")
    c.add_argument("--overwrite", action="store_true", help="replace a dataset this command collected before "
                   "(never one it did not write)")
    e = commands.add_parser("evaluate", help="success rate of a served policy or a baseline")
    e.add_argument("--task", required=True)
    e.add_argument("--episodes", type=int, default=50)
    e.add_argument("--out", type=Path, required=True, help="folder for summary.json, plots and result files")
    e.add_argument("--server", help="HOST:PORT of `python -m DiT4DiT.serving.server`")
    e.add_argument("--policy", default="server", choices=POLICIES,
                   help="server, or a baseline: zero (holds still), random, expert (Meta-World's scripted expert)")
    e.add_argument("--blank_images", action="store_true", help="send black frames (does the model use its cameras?)")
    add_scene_options(e)
    e.add_argument("--seed", type=int, default=1000, help="episode i uses seed SEED + i (collect uses 0..)")
    e.add_argument("--max_steps", type=int, default=150, help="steps before an episode counts as a failure")
    e.add_argument("--videos", type=int, default=3, help="episodes shown in frames.png")
    e.add_argument("--wait_s", type=float, default=10.0, help="how long to wait for the server to accept")
    e.add_argument("--num_envs", type=int, default=1,
                   help="environment processes, each with its own simulator and server connection; the episodes are "
                        "split into contiguous blocks, and the results are those of --num_envs 1")
    e.add_argument("--execution", default="sync", choices=("sync", "async", "rtc"),
                   help="sync: a chunk's rows, then the next request (the original's loop); async: ask with "
                        "--execution_horizon rows left and keep executing; rtc: async with real-time chunking")
    e.add_argument("--inference_delay", type=int, default=0,
                   help="policy steps a request takes to answer, simulated: the env keeps stepping with the old "
                        "chunk (sync: holds still) for this many steps; no wall clock")
    e.add_argument("--execution_horizon", type=int, default=None,
                   help="async/rtc: rows left when the next chunk is asked for (default max(delay, chunk / 2))")
    commands.add_parser("tasks", help="list the Meta-World v3 tasks")
    args = parser.parse_args(argv)
    configure_logging()
    return run_main(lambda: run_command(args))


def run_command(args: argparse.Namespace) -> None:
    if args.command == "tasks":
        print("\n".join(task_names()))
    elif args.command == "collect":
        folder = collect(args.task, args.episodes, args.out, setup=scene_setup(args), seed=args.seed,
                         max_steps=args.max_steps, version=args.lerobot_version, overwrite=args.overwrite)
        print(f"{folder}\ntrain on it with: {' '.join(training_options(folder))}")
    else:
        summary = evaluate(args.task, args.episodes, args.out, policy_name=args.policy, server=args.server,
                           blank_images=args.blank_images, setup=scene_setup(args), seed=args.seed,
                           max_steps=args.max_steps, videos=args.videos, wait_s=args.wait_s,
                           num_envs=args.num_envs, execution=args.execution, inference_delay=args.inference_delay,
                           execution_horizon=args.execution_horizon)
        low, high = summary["ci95"]
        seams = (f", seam jump mean {summary['seam_jump_mean']:.3f} max {summary['seam_jump_max']:.3f} (within a "
                 f"chunk {summary['step_change_mean']:.3f})" if summary["seams"] else "")
        print(f"{args.task} ({summary['policy']}, {args.execution}, delay {args.inference_delay}): "
              f"{summary['successes']}/{summary['episodes']} = {summary['success_rate']:.0%} (95% interval "
              f"{low:.0%}-{high:.0%}), mean length {summary['mean_length']:.0f} steps{seams} -> {args.out}/summary.json")


if __name__ == "__main__":
    sys.exit(main())
