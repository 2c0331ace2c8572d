"""Meta-World in closed loop, in its own environment (.venv-metaworld, built here by `make sim-env`): expert demos
written as a dataset our reader takes, the zero policy's summary, bad input, and demos -> train -> serve -> episodes.

Simulator processes start few and render small (32 px, the tiny model's size): starting one and rendering are
most of this file's time on a busy CI machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from DiT4DiT.evaluation.metaworld import DATA_CONFIG, camera_pair, dataset_action, dataset_name, env_action
from helpers.cli_runs import error_lines, free_port
from helpers.fixtures_data import PICKNPLACE, snapshot

ROOT = Path(__file__).resolve().parents[1]
SIM_PYTHON = ROOT / ".venv-metaworld" / "bin" / "python"
TASK = "handle-press-v3"
SIZE = "32"  # camera resolution of every simulator call here
CHUNK = 8  # the tiny config's future_action_window_size + 1
MODEL = ("--framework.action_model.state_dim=16", "--framework.action_model.action_dim=7",
         "--datasets.vla_data.max_state_dim=16", "--datasets.vla_data.max_action_dim=7")


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1",
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def metaworld(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SIM_PYTHON), "-m", "DiT4DiT.evaluation.metaworld", *args], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def sim_probe(python: Path, code: str) -> dict:
    """Run `code` in the simulator environment; the JSON it prints last."""
    result = subprocess.run([str(python), "-c", code], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="session")
def sim_env() -> Path:
    """The simulator environment, built once (CI builds it here; a failed build fails the tests).

    conftest points HOME at a session folder, so the build cache `make sim-env` keeps across runs lives under the
    system's temporary folder unless SIM_ENV_CACHE names one."""
    cache = os.environ.get("SIM_ENV_CACHE") or str(Path(tempfile.gettempdir()) / "dit4dit-sim-env")
    build = subprocess.run(["make", "sim-env", f"SIM_ENV_CACHE={cache}"], cwd=ROOT, capture_output=True, text=True,
                           timeout=900)
    assert build.returncode == 0, f"make sim-env failed:\n{build.stdout[-2000:]}\n{build.stderr[-2000:]}"
    probe = subprocess.run([str(SIM_PYTHON), "-c", "import sys, DiT4DiT.evaluation.metaworld, DiT4DiT.serving.client, "
                            "DiT4DiT.dataloader.writer; assert 'torch' not in sys.modules"],
                           cwd=ROOT, env=env(), capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr  # the client side and the writer import without torch
    return SIM_PYTHON


@pytest.fixture(scope="session")
def demos(sim_env, tmp_path_factory) -> Path:
    """The dataset of two handle-press expert demos (32 px), as `collect` writes it: a folder of its own."""
    root = tmp_path_factory.mktemp("metaworld_demos")
    result = metaworld("collect", "--task", TASK, "--episodes", "2", "--out", str(root), "--image_size", SIZE)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = root / f"metaworld_{TASK}_demos"
    assert [p.name for p in root.iterdir()] == [folder.name]  # nothing else: no LIBERO folder it stands in for
    assert f"--data_mix={folder} --data_config={DATA_CONFIG}" in result.stdout
    return folder


def test_actions_map_between_the_env_and_the_dataset_layout():
    env_row = np.array([0.5, -0.25, 1.0, -1.0], dtype=np.float32)
    row = dataset_action(env_row)
    assert row.tolist() == [0.5, -0.25, 1.0, 0.0, 0.0, 0.0, -1.0]
    assert env_action(row).tolist() == env_row.tolist()
    assert env_action(np.array([3.0, 0, 0, 0, 0, 0, -2.0])).tolist() == [1.0, 0.0, 0.0, -1.0]  # clipped to the env


def test_cameras_are_named_as_a_primary_wrist_pair():
    import argparse

    assert camera_pair("across, topview") == ("across", "topview")
    for bad in ("corner", "corner,gripperPOV,topview", "corner,"):
        with pytest.raises(argparse.ArgumentTypeError, match="primary then wrist"):
            camera_pair(bad)


@pytest.mark.slow
@pytest.mark.parametrize("version, episodes", [("v2.1", 2), ("v3.0", 1)])
def test_collected_demos_read_back_with_their_lengths_and_ranges(demos, sim_env, data_cfg, tmp_path, version,
                                                                  episodes):
    from helpers.fixtures_data import dataset_of

    folder = demos
    if version == "v3.0":
        result = metaworld("collect", "--task", TASK, "--episodes", str(episodes), "--out", str(tmp_path / "v3"),
                           "--lerobot_version", "v3.0", "--image_size", "48")
        assert result.returncode == 0, result.stderr[-3000:]
        folder = tmp_path / "v3" / f"metaworld_{TASK}_demos"
    info = json.loads((folder / "meta/info.json").read_text())
    assert info["codebase_version"] == version and info["total_episodes"] == episodes
    side = 48 if version == "v3.0" else int(SIZE)
    assert info["features"]["observation.images.primary_image"]["shape"] == [side, side, 3]
    dataset = dataset_of(data_cfg(folder.parent, str(folder), f"datasets.vla_data.data_config={DATA_CONFIG}",
                                         "datasets.vla_data.max_state_dim=16",
                                         "datasets.vla_data.max_action_dim=7", "datasets.vla_data.image_size=32",
                                         "datasets.vla_data.holdout_episodes=0"))  # v3.0 has one episode
    stats = dataset.statistics()["franka"]
    assert stats["num_trajectories"] == episodes and stats["num_transitions"] == info["total_frames"]
    # Expert episodes end at success, within collect's step limit.
    assert episodes * 10 <= info["total_frames"] <= episodes * 300
    state_min, state_max = np.array(stats["state"]["min"]), np.array(stats["state"]["max"])
    # Hand position inside Meta-World's hand space (m), the pad zero, the finger opening within 0..1.
    assert (state_min[:3] >= [-0.525, 0.348, -0.0525]).all() and (state_max[:3] <= [0.525, 1.025, 0.7]).all()
    assert state_min[6] == state_max[6] == 0.0 and 0.0 <= state_min[7] <= state_max[7] <= 1.0
    action_min, action_max = np.array(stats["action"]["min"]), np.array(stats["action"]["max"])
    assert (action_min >= -1).all() and (action_max <= 1).all() and action_max[:3].max() > 0.1  # the hand moves
    assert (action_min[3:6] == 0).all() and (action_max[3:6] == 0).all()
    sample = dataset[0]
    assert sample["lang"] == "handle press"
    assert tuple(sample["image"][0].shape) == (3, 32, 64)  # the two views at image_size 32, side by side
    assert tuple(sample["state"].shape) == (1, 16) and tuple(sample["action"].shape) == (CHUNK, 7)


@pytest.mark.slow
def test_the_zero_policy_never_succeeds_and_writes_the_summary(sim_env, tmp_path):
    # On reach-v3 with the views its benchmark uses: our own camera and the enlarged goal marker, the goal on a corner.
    task = "reach-v3"
    result = metaworld("evaluate", "--policy", "zero", "--task", task, "--episodes", "2", "--max_steps", "20",
                       "--videos", "1", "--out", str(tmp_path), "--image_size", SIZE, "--cameras", "across,topview",
                       "--goal_marker", "0.04", "--goal_set", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["suite"] == "metaworld" and summary["task"] == task and summary["policy"] == "zero"
    assert summary["episodes"] == 2 and summary["successes"] == 0 and summary["success_rate"] == 0.0
    assert summary["outcomes"] == [False, False] and summary["episode_lengths"] == [20, 20]
    assert summary["ci95"][0] == 0.0 and 0.5 < summary["ci95"][1] < 0.9  # Wilson, 0 of 2
    assert summary["latency"] is None and summary["seeds"] == [1000, 1001]
    assert summary["cameras"] == ["across", "topview"] and summary["goal_marker"] == 0.04 and summary["hand_start"] == 0
    assert summary["goal_set"] == 4
    adapters = json.loads((tmp_path / "success_rate_summary.json").read_text())
    assert adapters["per_task"] == {f"metaworld/{task}": 0.0} and adapters["episodes"] == 2
    from PIL import Image

    strip = np.asarray(Image.open(tmp_path / "frames.png").convert("RGB"))
    assert strip.shape == (32, 8 * 32, 3)  # one episode row of 8 frames
    # The green marker shows: pixels far greener than red and blue (none in Meta-World's own colours).
    green = (strip[..., 1].astype(int) - np.maximum(strip[..., 0], strip[..., 2]) > 100).reshape(32, 8, 32)
    assert green.sum(axis=(0, 2)).min() > 0
    # ... where the goal is from the first frame on (the zero policy moves nothing); reset() alone left the first
    # frame showing the previous configuration's goal, and --goal_set moves the goal after reset().
    centroids = np.array([np.argwhere(green[:, frame]).mean(axis=0) for frame in range(8)])
    assert np.abs(centroids - centroids[-1]).max() < 0.5, centroids
    assert (tmp_path / "outcomes.png").stat().st_size > 0


@pytest.mark.slow
def test_the_hand_starts_where_the_seed_says_within_hand_start(sim_env):
    probe = """
import json
from DiT4DiT.evaluation.metaworld import Scene, SceneSetup
starts = {}
for hand_start in (0.0, 0.1):
    scene = Scene("reach-v3", SceneSetup(image_size=32, hand_start=hand_start))
    starts[hand_start] = []
    for seed in (0, 1, 0):
        scene.reset(seed)
        starts[hand_start].append([float(v) for v in scene.state()[:3]])
    home = [float(v) for v in scene.hand_home]
    scene.close()
print(json.dumps({"starts": starts, "home": home}))
"""
    found = sim_probe(sim_env, probe)
    home, fixed, moved = np.array(found["home"]), np.array(found["starts"]["0.0"]), np.array(found["starts"]["0.1"])
    assert np.abs(fixed - fixed[0]).max() < 0.005  # Meta-World's own start, whatever the seed
    assert np.abs(moved[0] - moved[2]).max() < 1e-6  # a seed names its start
    assert np.abs(moved[0] - moved[1]).max() > 0.01
    # Within the cube around the start, give or take where the settled hand ends up.
    assert np.abs(moved - home).max() < 0.1 + 0.02 and np.abs(fixed[0] - home).max() < 0.02


@pytest.mark.slow
def test_the_goal_is_the_corner_the_seed_says_and_the_expert_reaches_it(sim_env):
    probe = """
import json
import numpy as np
from DiT4DiT.evaluation.errors import BadArgument
from DiT4DiT.evaluation.metaworld import Scene, SceneSetup
errors = []
for task, goal_set in (("reach-v3", -1), ("reach-v3", 5), ("handle-press-v3", 2)):
    try:
        Scene(task, SceneSetup(image_size=32, goal_set=goal_set))
    except BadArgument as error:
        errors.append(str(error))
scene = Scene("reach-v3", SceneSetup(image_size=32, hand_start=0.1, goal_set=4))
episodes = []
for seed in (0, 1, 2, 3, 4, 5, 0):
    scene.reset(seed)
    goal = [float(v) for v in scene.env._target_pos]
    seen = [float(v) for v in scene.obs[-3:]]
    steps = next((step for step in range(1, 101) if scene.step(scene.expert_action())), None)
    episodes.append({"goal": goal, "seen": seen, "steps": steps})
corners = scene.goal_positions.tolist()
scene.close()
print(json.dumps({"errors": errors, "corners": corners, "episodes": episodes}))
"""
    found = sim_probe(sim_env, probe)
    corners = np.array(found["corners"])
    # reach-v3's goal box, corners in x and z at its middle depth: 20 and 25 cm apart, so a blind guess is one corner.
    assert corners.shape == (4, 3) and np.allclose(np.abs(corners[:, 0]), 0.1) and np.allclose(corners[:, 1], 0.85)
    assert sorted(set(np.round(corners[:, 2], 3))) == [0.05, 0.3]
    assert len({tuple(c) for c in corners.tolist()}) == 4
    goals = np.array([episode["goal"] for episode in found["episodes"]])
    matches = [(np.abs(corners - goal) < 1e-9).all(axis=1) for goal in goals]
    assert all(match.sum() == 1 for match in matches), goals  # every goal on a corner
    on = [int(match.argmax()) for match in matches]
    assert on[0] == on[-1] and len(set(on)) >= 3  # the seed names the corner, and six seeds find most of them
    # The expert reads the goal from the observation: it must see the corner and reach it.
    assert all(episode["seen"] == episode["goal"] for episode in found["episodes"])
    assert all(episode["steps"] is not None for episode in found["episodes"]), found["episodes"]
    too_few, too_many, wrong_task = found["errors"]
    assert too_few.startswith("--goal_set -1: ") and too_many.startswith("--goal_set 5: ") and "1 to 4" in too_many
    assert wrong_task.startswith("--goal_set 2: ") and "handle-press-v3" in wrong_task and "reach-v3" in wrong_task


@pytest.mark.slow
def test_an_unknown_task_and_a_missing_server_are_one_line_errors(sim_env, tmp_path):
    unknown = metaworld("evaluate", "--policy", "zero", "--task", "handle-pres-v3", "--episodes", "1",
                        "--out", str(tmp_path))
    assert unknown.returncode == 2
    assert len(error_lines(unknown)) == 1 and "'handle-pres-v3'" in error_lines(unknown)[0]
    assert unknown.stderr.strip().splitlines() == error_lines(unknown)  # nothing else: no traceback
    assert "handle-press-v3" in unknown.stderr  # the closest name
    port = free_port()
    down = metaworld("evaluate", "--server", f"127.0.0.1:{port}", "--wait_s", "1", "--task", TASK, "--episodes", "1",
                     "--out", str(tmp_path))
    assert down.returncode == 1
    assert len(error_lines(down)) == 1 and f"no policy server at ws://127.0.0.1:{port}" in error_lines(down)[0]
    assert down.stderr.strip().splitlines()[-1] == error_lines(down)[0]
    assert not (tmp_path / "summary.json").exists()


@pytest.fixture(scope="module")
def demo_ckpt(demos, tiny_pipeline_dir, tmp_path_factory) -> Path:
    """steps_2_pytorch_model.pt of a 2-step launcher run on the demos."""
    runs = tmp_path_factory.mktemp("metaworld_runs")
    train = subprocess.run(["bash", "scripts/train_8p.sh", "--device=cpu", f"--data_mix={demos}",
                            f"--data_config={DATA_CONFIG}", f"--base_model={tiny_pipeline_dir}",
                            f"--run_root_dir={runs}",
                            "--run_id=mw", "--max_train_steps=2", "--save_interval=2", "--trainer.eval_interval=2",
                            "--datasets.vla_data.holdout_episodes=0",  # no held-out pass: the closed loop tests
                            f"--datasets.vla_data.cache_dir={runs / 'cache'}", "--datasets.vla_data.num_workers=0",
                            "--trackers=[jsonl]", *MODEL], cwd=ROOT, env=env(), capture_output=True, text=True,
                           timeout=900)
    assert train.returncode == 0, train.stderr[-3000:]
    return runs / "mw" / "checkpoints" / "steps_2_pytorch_model.pt"


def serve(ckpt: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "DiT4DiT.serving.server", "--ckpt", str(ckpt), "--host",
                             "127.0.0.1", "--port", str(port), "--device", "cpu"], cwd=ROOT, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_demos_train_serve_and_run_closed_loop_episodes(demo_ckpt, tmp_path):
    """The whole chain: the launcher trains 2 steps on the demos, the server serves them, the adapter runs 2 episodes."""
    from DiT4DiT.evaluation.observations import StateEncoder
    from DiT4DiT.serving.client import PolicyClient

    port = free_port()
    server = serve(demo_ckpt, port)
    try:
        out = tmp_path / "eval"
        result = metaworld("evaluate", "--server", f"127.0.0.1:{port}", "--wait_s", "300", "--task", TASK,
                           "--episodes", "2", "--max_steps", "12", "--out", str(out), "--image_size", SIZE)
        assert result.returncode == 0, result.stderr[-3000:]
        with PolicyClient("127.0.0.1", port, wait_s=10) as client:
            meta = client.metadata
            state = np.array([0.0, 0.6, 0.2, 0.0, 0.8, 0.05, 0.0, 1.0])  # a state in the dataset's layout
            example = {"image": [np.zeros((32, 64, 3), np.uint8)], "lang": "handle press",
                       "state": StateEncoder(meta)(state)}
            reply = client.infer([example])
    finally:
        server.terminate()
        server.wait(timeout=60)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "server" and summary["episodes"] == 2 and summary["image_size"] == int(SIZE)
    assert summary["cameras"] == ["corner", "gripperPOV"] and summary["goal_marker"] == 0.0
    assert len(summary["episode_lengths"]) == 2 and all(1 <= n <= 12 for n in summary["episode_lengths"])
    # One request per action chunk: 12 steps need 2 chunks of 8 per episode (fewer for an episode that succeeds).
    expected = sum(-(-n // CHUNK) for n in summary["episode_lengths"])
    assert summary["latency"]["requests"] == expected and summary["latency"]["median_ms"] > 0
    assert meta["image_size"] == 32 and meta["action_chunk"] == CHUNK and meta["action_dim"] == 7
    assert meta["state_dim"] == 16
    actions = reply["actions"]
    assert actions.shape == (1, CHUNK, 7) and np.isfinite(actions).all()
    # Robot units: the dataset's range for the min-max dims (displacements, rotations 0), the grip as recorded.
    low, high = np.array(meta["statistics"]["action"]["min"]), np.array(meta["statistics"]["action"]["max"])
    assert (actions[0, :, :6] >= low[:6] - 1e-6).all() and (actions[0, :, :6] <= high[:6] + 1e-6).all()
    assert (actions[0, :, 3:6] == 0).all()


PARALLEL_RUN = ("evaluate", "--task", "reach-v3", "--episodes", "6", "--max_steps", "45", "--image_size", SIZE,
                "--hand_start", "0.1", "--videos", "1")


def per_episode(out: Path) -> tuple[list, list, bytes]:
    summary = json.loads((out / "summary.json").read_text())
    return summary["outcomes"], summary["episode_lengths"], (out / "frames.png").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["expert", "random"])
def test_two_environment_processes_give_the_serial_per_episode_results(sim_env, tmp_path, policy):
    # The expert's lengths depend on the goal and the hand's start, so equal lengths mean equal configurations.
    runs = {}
    for n in ("1", "2"):
        out = tmp_path / n
        result = metaworld(*PARALLEL_RUN, "--policy", policy, "--num_envs", n, "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
        runs[n] = per_episode(out)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["num_envs"] == int(n) and summary["retried_episodes"] == []
    assert runs["1"] == runs["2"]  # outcomes, lengths and the first episode's frames
    if policy == "expert":
        assert 0 < sum(runs["1"][0]) < 6 and len(set(runs["1"][1])) > 1  # a mixed table, not a constant one
    again = metaworld(*PARALLEL_RUN, "--policy", policy, "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert per_episode(tmp_path / "again") == runs["1"]  # a seed names its configuration, run after run


@pytest.mark.slow
def test_a_served_policy_gives_the_serial_per_episode_results_in_two_processes(demo_ckpt, tmp_path):
    # Each request's noise seed comes from its episode's seed and step, so the batching server draws the same noise
    # for it whichever requests arrive with it. The frames of every episode show where the served actions moved the
    # hand; an untrained policy rarely succeeds, so the frames are what tells two runs apart.
    port = free_port()
    server = serve(demo_ckpt, port)
    runs = {}
    try:
        for n in ("1", "2", "1"):
            out = tmp_path / f"{n}-{len(runs)}"
            result = metaworld("evaluate", "--server", f"127.0.0.1:{port}", "--wait_s", "300", "--task", TASK,
                               "--episodes", "4", "--max_steps", "12", "--image_size", SIZE, "--hand_start", "0.1",
                               "--videos", "4", "--num_envs", n, "--out", str(out))
            assert result.returncode == 0, result.stderr[-3000:]
            summary = json.loads((out / "summary.json").read_text())
            assert summary["num_envs"] == int(n) and summary["retried_episodes"] == []
            assert summary["latency"]["requests"] == sum(-(-steps // CHUNK) for steps in summary["episode_lengths"])
            runs[out.name] = per_episode(out)
    finally:
        server.terminate()
        server.wait(timeout=60)
    serial, parallel, again = runs.values()
    assert parallel == serial  # outcomes, lengths and every episode's frames
    assert again == serial


@pytest.mark.slow
def test_chunks_run_async_and_with_real_time_chunking_under_a_simulated_delay(demo_ckpt, tmp_path):
    port = free_port()
    server = serve(demo_ckpt, port)
    summaries = {}
    try:
        for execution, delay in (("rtc", "4"), ("async", "2"), ("sync", "2")):
            out = tmp_path / f"{execution}{delay}"
            result = metaworld("evaluate", "--server", f"127.0.0.1:{port}", "--wait_s", "300", "--task", TASK,
                               "--episodes", "2", "--max_steps", "24", "--image_size", SIZE, "--videos", "0",
                               "--execution", execution, "--inference_delay", delay, "--out", str(out))
            assert result.returncode == 0, result.stderr[-3000:]
            assert f", {execution}, delay {delay}): " in result.stdout and "seam jump mean" in result.stdout
            summaries[execution] = json.loads((out / "summary.json").read_text())
    finally:
        server.terminate()
        server.wait(timeout=60)
    rtc, naive, sync = summaries["rtc"], summaries["async"], summaries["sync"]
    assert (rtc["execution"], rtc["inference_delay"], rtc["execution_horizon"]) == ("rtc", 4, None)
    for summary in summaries.values():
        assert summary["seams"] > 0 and 0 <= summary["seam_jump_mean"] <= summary["seam_jump_max"]
        assert summary["step_change_mean"] >= 0
    # Episodes that run their 24 steps: the first reply after the delay, then async and rtc ask with 4 rows left
    # (each later chunk runs 4 rows: 8 rows, less the delay's, less the 4 left); sync asks when a chunk is used up.
    if rtc["episode_lengths"] == [24, 24]:
        assert rtc["latency"]["requests"] == 2 * 5  # chunk 1 at step 0, then every 4 steps from step 8
    if sync["episode_lengths"] == [24, 24]:
        assert sync["latency"]["requests"] == 2 * 3  # steps 0, 10 and 20: 8 rows after each 2-step wait


@pytest.mark.slow
def test_a_killed_environment_process_is_reported_and_its_episodes_rerun(sim_env, tmp_path):
    import re
    import signal

    serial = metaworld(*PARALLEL_RUN, "--policy", "expert", "--out", str(tmp_path / "serial"))
    assert serial.returncode == 0, serial.stderr[-3000:]
    process = subprocess.Popen([str(SIM_PYTHON), "-m", "DiT4DiT.evaluation.metaworld", *PARALLEL_RUN, "--policy",
                                "expert", "--num_envs", "2", "--out", str(tmp_path / "parallel")], cwd=ROOT, env=env(),
                               stderr=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:  # kill environment process 1 as soon as it is named, while it starts its scene
        lines.append(line)
        started = re.search(r"environment process 1 \(pid (\d+)\)", line)
        if started:
            os.kill(int(started.group(1)), signal.SIGKILL)
            break
    lines += process.stderr.readlines()
    assert process.wait(timeout=300) == 0, "".join(lines)[-3000:]
    crash = [line for line in lines if "killed by SIGKILL during episode" in line]
    assert len(crash) == 1, "".join(lines)
    episode = int(re.search(r"during episode (\d) \(seed 100\d\)", crash[0]).group(1))
    assert episode in (3, 4, 5)  # process 1's block; 3 unless it had finished some before the kill
    assert f"retrying its {6 - episode} unfinished episodes in a new process" in crash[0]
    summary = json.loads((tmp_path / "parallel" / "summary.json").read_text())
    assert summary["retried_episodes"] == [episode]
    assert per_episode(tmp_path / "parallel") == per_episode(tmp_path / "serial")  # no hole, the same table


# Meta-World options that cannot work: one line naming the option, exit 2, nothing written (issue 30).
BAD_OPTIONS = [
    (("--image_size", "0"), "--image_size 0: render 16 to 480 pixels"),
    (("--image_size", "1000"), "--image_size 1000: render 16 to 480 pixels"),
    (("--server", "127.0.0.1:99999"), "'127.0.0.1:99999': give HOST:PORT with a port from 1 to 65535"),
    (("--goal_marker", "nan"), "--goal_marker nan: give a distance in m, 0 or more"),
    (("--hand_start", "-0.1"), "--hand_start -0.1: give a distance in m, 0 or more"),
    (("--max_steps", "-5"), "--max_steps -5: give a number of at least 1"),
    (("--videos", "-1"), "--videos -1: give a number of at least 0"),
    (("--wait_s", "nan"), "--wait_s nan: give a number of at least 0"),
    (("--seed", "-1"), "--seed -1: episodes use seeds SEED..SEED+1"),
    (("--seed", "4294967295"), "--seed 4294967295: episodes use seeds SEED..SEED+1"),
    (("--num_envs", "0"), "--num_envs 0: run at least 1 environment process"),
    (("--inference_delay", "-1"), "--inference_delay -1: give 0 or more policy steps"),
    (("--policy", "zero", "--execution", "rtc"), "--execution rtc --inference_delay 0: chunks are executed for "
                                                 "--policy server only"),
]


@pytest.mark.parametrize("options, message", BAD_OPTIONS, ids=[" ".join(o) for o, _ in BAD_OPTIONS])
def test_a_bad_evaluate_option_is_one_line(tmp_path, options, message):
    # The checks run before any simulator: the training environment, without Meta-World, gives the same line.
    out = tmp_path / "out"
    base = {"--server": "127.0.0.1:10093", "--episodes": "2"}
    args = [item for key, value in base.items() if key not in options for item in (key, value)]
    result = subprocess.run([sys.executable, "-m", "DiT4DiT.evaluation.metaworld", "evaluate", "--task", TASK, *args,
                             *options, "--out", str(out)], cwd=ROOT, env=env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == error_lines(result) and len(error_lines(result)) == 1
    assert message in error_lines(result)[0]
    assert not out.exists()


def test_a_bad_collect_option_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "DiT4DiT.evaluation.metaworld", "collect", "--task", TASK,
                             "--episodes", "1", "--image_size", "0", "--out", str(tmp_path / "out")], cwd=ROOT,
                            env=env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and error_lines(result) == ["error: --image_size 0: render 16 to 480 pixels "
                                                              "(Meta-World's off-screen buffer)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["a recorded dataset", "a foreign folder", "a file"])
def test_collect_overwrite_refuses_what_it_did_not_collect(tmp_path, content):
    # --overwrite replaced any folder holding meta/info.json: pointed at a dataset recorded elsewhere (hours of
    # robot demonstrations), it deleted it. Refused before any simulator starts, so the training environment,
    # without Meta-World, gives the same line.
    target = tmp_path / "out" / dataset_name(TASK)
    target.parent.mkdir()
    refused = (f"--out {target} holds {{}} but no .written_by naming metaworld collect: not a folder this tool wrote, "
               "so --overwrite will not delete it; give another --out or delete it yourself")
    if content == "a recorded dataset":
        shutil.copytree(PICKNPLACE, target)
        message = refused.format("a LeRobot dataset (meta/info.json)")
    elif content == "a file":
        target.write_text("notes\n")
        message = f"--out {target} is a regular file; it must be a folder or a new path"
    else:
        target.mkdir()
        (target / "notes.txt").write_text("notes\n")
        message = refused.format("1 entry (notes.txt)")
    before = snapshot(tmp_path)
    result = subprocess.run([sys.executable, "-m", "DiT4DiT.evaluation.metaworld", "collect", "--task", TASK,
                             "--episodes", "1", "--image_size", SIZE, "--out", str(tmp_path / "out"), "--overwrite"],
                            cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(error_lines(result)) == 1 and message in error_lines(result)[0], result.stderr[-2000:]
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_collect_overwrite_replaces_a_dataset_it_collected(demos, tmp_path):
    target = tmp_path / demos.name
    shutil.copytree(demos, target)
    (target / "stale.txt").write_text("from the first collection")
    result = metaworld("collect", "--task", TASK, "--episodes", "1", "--out", str(tmp_path), "--image_size", SIZE,
                       "--overwrite")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (target / "stale.txt").exists() and (target / ".written_by").read_text() == "metaworld collect\n"
    assert json.loads((target / "meta" / "info.json").read_text())["total_episodes"] == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [demos.name]  # nothing left beside it


@pytest.mark.slow
def test_training_logs_closed_loop_success_rates_from_a_side_process(demos, tiny_pipeline_dir, tmp_path):
    """trainer.closed_loop_eval in a tiny run through the launcher: the side process serves the step-2 checkpoint,
    runs 2 episodes, and the run's end waits for it; the rate lands in metrics.jsonl and the plot's second panel."""
    from PIL import Image

    runs = tmp_path / "runs"
    train = subprocess.run(["bash", "scripts/train_8p.sh", "--device=cpu", f"--data_mix={demos}",
                            f"--data_config={DATA_CONFIG}", f"--base_model={tiny_pipeline_dir}",
                            f"--run_root_dir={runs}",
                            "--run_id=mw_cl", "--max_train_steps=2", "--save_interval=2", "--trainer.eval_interval=2",
                            "--datasets.vla_data.holdout_episodes=0", "--datasets.vla_data.num_workers=0",
                            f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}", "--trackers=[jsonl]", *MODEL,
                            "--trainer.closed_loop_eval.interval=2", f"--trainer.closed_loop_eval.task={TASK}",
                            "--trainer.closed_loop_eval.episodes=2", "--trainer.closed_loop_eval.max_steps=12",
                            "--trainer.closed_loop_eval.num_envs=2",
                            f"--trainer.closed_loop_eval.evaluate_options=--image_size {SIZE}"],
                           cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    assert train.returncode == 0, train.stderr[-3000:]
    run = runs / "mw_cl"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r for r in records if "closed_loop_success_rate" in r]
    assert len(rates) == 1 and rates[0]["step"] == 2 and rates[0]["closed_loop_episodes"] == 2
    rate = rates[0]
    assert rate["closed_loop_ci95_low"] <= rate["closed_loop_success_rate"] <= rate["closed_loop_ci95_high"]
    assert rate["closed_loop_success_rate"] in (0.0, 0.5, 1.0)
    summary = json.loads((run / "closed_loop" / "steps_2" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["image_size"] == int(SIZE) and summary["num_envs"] == 2
    assert summary["success_rate"] == rate["closed_loop_success_rate"] and summary["latency"]["requests"] >= 2
    output = train.stdout + train.stderr  # the launcher sends the ranks' logs to its stdout
    assert f"closed loop at step 2: {TASK} {summary['successes']}/2" in output
    # The run ended before the side process did (a server's start alone outlasts a 2-step run) and waited for it.
    assert "waiting for the closed-loop evaluation of step 2" in output
    plot = Image.open(run / "loss_curve.png")
    assert plot.size[1] > 600  # two panels (one is 440 pixels high)


def closed_loop_run(demo_ckpt: Path, root: Path) -> Path:
    """A run folder whose step-2 checkpoint is the demos run's (links), for a side process to evaluate."""
    run = root / "run"
    run.mkdir()
    for name in ("checkpoints", "config.yaml", "dataset_statistics.json"):
        (run / name).symlink_to(demo_ckpt.parents[1] / name)
    return run


def side_process_settings():
    from DiT4DiT.config.sections import TrainerClosedLoopEvalSection

    # Long enough to be killed mid-way: 200 episodes over two simulator processes.
    return TrainerClosedLoopEvalSection(interval=2, task=TASK, episodes=200, max_steps=150, num_envs=2,
                                        python=str(SIM_PYTHON), evaluate_options=f"--image_size {SIZE}")


def running(pid: int) -> bool:
    from DiT4DiT.host.process_lifetime import process_state

    return process_state(pid) not in ("state unknown", "a zombie")


def wait_for_episodes(run: Path, tree_of: int) -> list[int]:
    """The processes below `tree_of` once both simulator processes talk to the server (side process, server,
    evaluation, its two environment processes)."""
    from helpers.cli_runs import descendants

    server_log = run / "closed_loop" / "steps_2" / "server.log"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server_log.is_file() and server_log.read_text(errors="replace").count("opened") >= 2:
            return descendants(tree_of)
        time.sleep(0.5)
    raise AssertionError(f"the episodes did not start:\n{server_log.read_text(errors='replace')[-2000:]}")


def all_end(pids: list[int], within_s: float = 60) -> list[int]:
    deadline = time.monotonic() + within_s
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if running(pid)]


@pytest.mark.slow
def test_killing_the_trainer_ends_its_side_process_server_and_simulators(demo_ckpt, tmp_path):
    # Before, a killed trainer left its side process, the policy server (7-9 GiB at full size) and the simulators
    # running until someone found them.
    run = closed_loop_run(demo_ckpt, tmp_path)
    trainer = subprocess.Popen([sys.executable, "-c", (
        "import pathlib, sys, time\n"
        "sys.path[:0] = ['tests']\n"
        "from test_closed_loop_metaworld import side_process_settings\n"
        "from DiT4DiT.training.closed_loop_eval import ClosedLoopEvaluator\n"
        f"ClosedLoopEvaluator(side_process_settings(), pathlib.Path({str(run)!r}), 2, print, 60).start(2)\n"
        "time.sleep(900)\n")], cwd=ROOT, env=env())
    tree = []
    try:
        tree = wait_for_episodes(run, trainer.pid)
        assert len(tree) >= 5, tree  # nice/side process, server, evaluation, two environment processes
        trainer.kill()
        trainer.wait()
        assert not all_end(tree)
    finally:
        trainer.kill()
        for pid in filter(running, tree):
            os.kill(pid, 9)


@pytest.mark.slow
def test_a_killed_side_process_is_named_and_its_server_and_simulators_end(demo_ckpt, tmp_path, caplog):
    import logging
    import signal

    from DiT4DiT.training.closed_loop_eval import ClosedLoopEvaluator
    from helpers.cli_runs import descendants

    run = closed_loop_run(demo_ckpt, tmp_path)
    evaluator = ClosedLoopEvaluator(side_process_settings(), run, 2, print, 60)
    tree = []
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env().items():
            patch.setenv(name, value)
        evaluator.start(2)
    side = evaluator.running[1]
    try:
        tree = wait_for_episodes(run, side.pid)
        assert len(tree) >= 4, tree
        side.send_signal(signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="dit4dit.closed_loop"):
            deadline = time.monotonic() + 60
            while evaluator.running is not None and time.monotonic() < deadline:
                evaluator.collect()
                time.sleep(0.2)
        assert not all_end(tree)
        assert "closed-loop evaluation of step 2 failed (killed by SIGKILL)" in caplog.text
    finally:
        for pid in filter(running, [side.pid, *tree, *descendants(side.pid)]):
            os.kill(pid, 9)
