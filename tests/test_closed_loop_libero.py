"""LIBERO in closed loop, in its own environment (.venv-libero; `make test-libero` builds it and runs this file, which
is not in CI): a tiny model at LIBERO's sizes (224-pixel views, 16 state dims, 7 actions) trained 1 step by the
launcher and served over the websocket, one short libero_spatial episode through our adapter and one through the
original's eval_libero.py client path (DIT4DIT_ORIGINAL=the original's checkout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers.cli_runs import error_lines, free_port
from helpers.fixtures_serving import server_process, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
LIBERO_PYTHON = ROOT / ".venv-libero" / "bin" / "python"
ORIGINAL_ENV = "DIT4DIT_ORIGINAL"
SUITE, TASK = "libero_spatial", 0
TASK_LANGUAGE = "pick up the black bowl between the plate and the ramekin and place it on the plate"
STEPS, WAIT = 16, 2  # policy steps per episode (2 chunks of 8), steps holding still before them
CHUNK = 8  # the tiny config's future_action_window_size + 1
MODEL = ("--framework.action_model.state_dim=16", "--framework.action_model.action_dim=7",
         "--datasets.vla_data.max_state_dim=16", "--datasets.vla_data.max_action_dim=7",
         "--datasets.vla_data.image_size=224")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not LIBERO_PYTHON.exists(),
                                 reason=".venv-libero is missing: `make test-libero` builds it (2.2 GB) and runs this")]


def env(pythonpath: Path | str = ROOT) -> dict:
    return dict(os.environ, PYTHONPATH=str(pythonpath), OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1",
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture(scope="module")
def libero_ckpt(tiny_pipeline_dir, tmp_path_factory) -> Path:
    """steps_1_pytorch_model.pt of a 1-step launcher run on a tiny libero_franka dataset at image_size 224."""
    root = tmp_path_factory.mktemp("libero_run")
    data = subprocess.run([sys.executable, "-m", "DiT4DiT.tools.tiny_dataset", "--data_mix", "libero_all", "--datasets",
                           "1", "--episodes", "2", "--height", "64", "--width", "64", "--out", str(root / "data")],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert data.returncode == 0, data.stderr[-3000:]
    train = subprocess.run(["bash", "scripts/train_8p.sh", "--device=cpu", "--data_mix=libero_all",
                            f"--data_root_dir={root / 'data'}", f"--base_model={tiny_pipeline_dir}",
                            f"--run_root_dir={root / 'runs'}", "--run_id=libero", "--max_train_steps=1",
                            "--save_interval=1", "--trainer.eval_interval=1", "--trackers=[jsonl]",
                            f"--datasets.vla_data.cache_dir={root / 'cache'}", "--datasets.vla_data.num_workers=0",
                            "--datasets.vla_data.per_device_batch_size=1", *MODEL],
                           cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    assert train.returncode == 0, train.stderr[-3000:]
    return root / "runs" / "libero" / "checkpoints" / "steps_1_pytorch_model.pt"


@pytest.fixture(scope="module")
def server(libero_ckpt):
    """(port, metadata) of `DiT4DiT.serving.server` serving the checkpoint."""
    from DiT4DiT.serving.client import PolicyClient

    process = server_process("--ckpt", str(libero_ckpt), "--host", "127.0.0.1", "--port", "0", "--device", "cpu",
                             env=env())
    lines: list[str] = []
    try:
        port = wait_for_port(process, lines)
        with PolicyClient("127.0.0.1", port, wait_s=10) as client:
            meta = client.metadata
        assert (meta["image_size"], meta["state_dim"], meta["action_dim"]) == (224, 16, 7)
        assert meta["action_chunk"] == CHUNK
        yield port, meta
    finally:
        process.terminate()
        process.wait(timeout=60)


def libero(*args: str, python: Path = LIBERO_PYTHON) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "DiT4DiT.evaluation.libero", *args], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=900)


def test_an_unknown_suite_a_missing_server_and_a_missing_simulator_are_one_line_errors(tmp_path):
    unknown = libero("--task_suite", "libero_spatail", "--out", str(tmp_path))
    assert unknown.returncode == 2 and unknown.stderr.strip().splitlines() == error_lines(unknown)
    assert "'libero_spatail'" in unknown.stderr and "closest: libero_spatial" in unknown.stderr
    port = free_port()
    down = libero("--port", str(port), "--wait_s", "1", "--task_suite", SUITE, "--out", str(tmp_path))
    assert down.returncode == 1 and len(error_lines(down)) == 1
    assert f"no policy server at ws://127.0.0.1:{port}" in error_lines(down)[0]
    assert down.stderr.strip().splitlines()[-1] == error_lines(down)[0]
    seed = libero("--seed=-1", "--out", str(tmp_path))
    assert seed.returncode == 2 and error_lines(seed) == ["error: --seed -1: give an integer in 0..4294967295"]
    missing = libero("--port", str(port), "--out", str(tmp_path), python=Path(sys.executable))  # no LIBERO there
    assert missing.returncode == 1 and "make libero-env" in error_lines(missing)[0]
    assert not list(tmp_path.iterdir())  # nothing written by any of them


def action_range(meta) -> tuple[np.ndarray, np.ndarray]:
    """The dataset's action min / max (robot units) the served actions must stay within, 7 dims."""
    stats = meta["statistics"]["action"]
    return np.array(stats["min"])[:7], np.array(stats["max"])[:7]


def test_one_episode_through_our_adapter_writes_the_originals_layout_and_our_summary(server, tmp_path):
    port, meta = server
    out = tmp_path / "ours"
    result = libero("--port", str(port), "--task_suite", SUITE, "--tasks", str(TASK), "--num_trials_per_task", "1",
                    "--max_steps", str(STEPS), "--num_steps_wait", str(WAIT), "--fast_render", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["suite"] == SUITE and summary["task"] == str(TASK) and summary["policy"] == "server"
    assert summary["episodes"] == 1 and summary["outcomes"] == [summary["successes"] == 1]
    assert summary["episode_lengths"] == [STEPS] or summary["successes"] == 1  # a 1-step model rarely succeeds
    # One request per chunk of 8 policy steps; the waiting steps ask nothing.
    assert summary["latency"]["requests"] == -(-summary["episode_lengths"][0] // CHUNK)
    assert summary["max_steps"] == STEPS and summary["trials_per_task"] == 1 and summary["fast_render"] is True
    task_result = json.loads((out / f"{SUITE}__{TASK_LANGUAGE.replace(' ', '_')}.result.json").read_text())
    assert task_result["task"] == TASK_LANGUAGE and task_result["episodes"] == 1
    adapters = json.loads((out / "success_rate_summary.json").read_text())
    assert adapters["per_task"] == {f"{SUITE}/{TASK_LANGUAGE}": summary["success_rate"]}
    # The original's layout: the log its calculate_libero_success_rate.py reads, one replay video per episode.
    log = (out / f"eval_libero_{SUITE}.log").read_text()
    assert f"Task: {TASK_LANGUAGE}\n" in log and f"Current task success rate: {summary['success_rate']}\n" in log
    assert f"Total success rate: {summary['success_rate']}\n" in log
    suffix = "success" if summary["successes"] else "failure"
    video = out / f"rollout_{TASK_LANGUAGE.replace(' ', '_')}_episode0_{suffix}.mp4"
    import av

    with av.open(str(video)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(frames) == summary["episode_lengths"][0] and frames[0].shape == (256, 256, 3)
    from PIL import Image

    assert Image.open(out / "frames.png").size == (8 * 256, 256)
    original = os.environ.get(ORIGINAL_ENV)
    if original:  # the original's own summary script reads our log
        parsed = subprocess.run([sys.executable, str(Path(original) / "utils" / "calculate_libero_success_rate.py"),
                                 "--log_dir", str(out)], capture_output=True, text=True, timeout=60)
        assert parsed.returncode == 0, parsed.stdout
        assert f"{TASK_LANGUAGE}: {summary['success_rate']:.2f}" in parsed.stdout, parsed.stdout
        assert "Total tasks: 1" in parsed.stdout


def test_two_environment_processes_merge_into_the_serial_layout(server, tmp_path):
    """--num_envs 2 on 2 trials of a task: one trial per process, each process resetting its env as often as a serial
    run would have before its first trial; the merged log, result file and videos are the serial run's layout,
    and the episodes (outcome, length, frames) are the serial run's."""
    port, _ = server
    runs = {}
    for n in ("1", "2"):
        out = tmp_path / n
        result = libero("--port", str(port), "--task_suite", SUITE, "--tasks", str(TASK), "--num_trials_per_task", "2",
                        "--max_steps", str(STEPS), "--num_steps_wait", str(WAIT), "--fast_render", "--videos", "2",
                        "--num_envs", n, "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["num_envs"] == int(n) and summary["retried_episodes"] == [] and summary["episodes"] == 2
        runs[n] = summary["outcomes"], summary["episode_lengths"], (out / "frames.png").read_bytes()
        log = (out / f"eval_libero_{SUITE}.log").read_text()
        assert log.count(f"Task: {TASK_LANGUAGE}\n") == 1 and "Total episodes: 2\n" in log
        videos = sorted(p.name.split("_episode")[1] for p in out.glob("rollout_*.mp4"))
        assert [name.split("_")[0] for name in videos] == ["0", "1"]  # one per trial, whichever process ran it
    # A 1-step model does not finish the task in 16 steps, so the frames of both trials are what shows that each
    # trial started where the serial run starts it and drew the same noise (its requests are seeded by trial).
    assert runs["1"][:2] == ([False, False], [STEPS, STEPS])
    assert runs["2"] == runs["1"]


# The original eval_libero.py's loop for one episode, capped at STEPS policy steps, through its own ModelClient,
# its websocket client and its helpers (the script itself runs every task of the suite for 220+ steps each).
ORIGINAL_EPISODE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from libero.libero import benchmark
    from examples.LIBERO.eval_files import eval_libero as original

    ckpt, (port, task_id, steps, wait) = sys.argv[1], map(int, sys.argv[2:6])
    suite = benchmark.get_benchmark_dict()["libero_spatial"]()
    env, description = original._get_libero_env(suite.get_task(task_id), original.LIBERO_ENV_RESOLUTION, 7)
    client = original.ModelClient(policy_ckpt_path=ckpt, host="127.0.0.1", port=port, image_size=[224, 224])
    client.reset(task_description=description)
    env.reset()
    obs = env.set_init_state(suite.get_task_init_states(task_id)[0])
    actions, done = [], False
    for t in range(wait + steps):
        if t < wait:
            obs, _, done, _ = env.step(original.LIBERO_DUMMY_ACTION)
            continue
        example = {"image": np.ascontiguousarray(obs["agentview_image"][::-1, ::-1]),
                   "wrist_image": np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1]),
                   "lang": description,
                   "state": np.concatenate((obs["robot0_eef_pos"], original._quat2axisangle(obs["robot0_eef_quat"]),
                                            obs["robot0_gripper_qpos"]))}
        raw = client.step(example=example, step=t - wait)["raw_action"]
        action = np.concatenate([raw["world_vector"], raw["rotation_delta"],
                                 original._binarize_gripper_open(raw["open_gripper"])])
        actions.append(action.tolist())
        obs, _, done, _ = env.step(action.tolist())
        if done:
            break
    env.close()
    print("RESULT " + json.dumps({"actions": actions, "done": bool(done), "description": description,
                                  "chunk": client.action_chunk_size, "state_dim": client.max_state_dim}))
""")


@pytest.mark.skipif(not os.environ.get(ORIGINAL_ENV),
                    reason=f"set {ORIGINAL_ENV} to a checkout of the original DiT4DiT to run its LIBERO client")
def test_one_episode_through_the_originals_client(server, libero_ckpt, tmp_path):
    original = os.environ[ORIGINAL_ENV]
    port, meta = server
    script = tmp_path / "original_episode.py"
    script.write_text(ORIGINAL_EPISODE)
    # The original's checkout alone on the path: its packages (DiT4DiT, examples, deployment) have our names.
    result = subprocess.run([str(LIBERO_PYTHON), str(script), str(libero_ckpt), str(port), str(TASK), str(STEPS),
                             str(WAIT)], cwd=original, env=env(original), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    reply = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert reply["description"] == TASK_LANGUAGE and (reply["chunk"], reply["state_dim"]) == (CHUNK, 16)
    actions = np.array(reply["actions"])
    assert actions.shape == (STEPS, 7) or reply["done"]
    # Robot units: deltas within the dataset's range where the original unnormalises, the gripper -1 / +1.
    low, high = action_range(meta)
    assert (actions[:, :6] >= low[:6] - 1e-5).all() and (actions[:, :6] <= high[:6] + 1e-5).all()
    assert set(np.unique(actions[:, 6])) <= {-1.0, 1.0}
    # The chunk's rows are executed in order: rows of one chunk differ (a constant would mean one row repeated).
    assert len({tuple(row) for row in actions[:CHUNK, :6].round(6)}) > 1
