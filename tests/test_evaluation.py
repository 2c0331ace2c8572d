"""Evaluation: open-loop on the tiny run, adaptive ensembling by hand, and the LIBERO / RoboCasa adapters driving
fake environments (same reset/step interface as the simulators) through the real server and client."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from DiT4DiT.evaluation.ensemble import AdaptiveEnsembler
from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.evaluation.libero import LiberoPolicy, quaternion_to_axis_angle, run_libero_task
from DiT4DiT.evaluation.robocasa import RobocasaPolicy, run_robocasa
from DiT4DiT.evaluation.server_policy import request_seed
from DiT4DiT.evaluation.summary import main as summary_main
from DiT4DiT.evaluation.summary import summarize, write_task_result
from DiT4DiT.serving.client import PolicyClient
from DiT4DiT.serving.server import running_server

PNG = b"\x89PNG\r\n\x1a\n"
CHUNK = 8
ROBOTWIN_PARTS = (("left_joints", 6), ("right_joints", 6), ("left_gripper", 1), ("right_gripper", 1))


# --- open loop ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_open_loop_writes_its_summary_and_plots_on_the_tiny_run(tiny_ckpt, tiny_robotwin_root, tmp_path):
    from DiT4DiT.evaluation.open_loop import main

    out = tmp_path / "open_loop"
    code = main(["--ckpt", str(tiny_ckpt), "--data_root_dir", str(tiny_robotwin_root), "--data_mix", "robotwin",
                 "--episodes", "2", "--out", str(out), "--device", "cpu", "--cache_dir", str(tmp_path / "cache")])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["joints"]) == 14 and summary["joints"][0] == "left_joints.0"
    assert len(summary["per_joint"]["mse"]) == len(summary["per_joint"]["mae"]) == 14
    assert len(summary["episodes"]) == 2
    assert summary["steps"] == sum(e["steps"] for e in summary["episodes"]) > CHUNK
    assert math.isclose(summary["mse"], float(np.mean(summary["per_joint"]["mse"])), rel_tol=1e-9)
    assert all(np.isfinite(summary["per_joint"]["mae"]))
    for episode in summary["episodes"]:
        assert (out / episode["plot"]).read_bytes()[:8] == PNG
    assert (out / "per_joint_error.png").read_bytes()[:8] == PNG


def test_open_loop_on_an_empty_eval_split_names_the_key(tmp_path):
    from types import SimpleNamespace

    from DiT4DiT.config.errors import ConfigError
    from DiT4DiT.evaluation.open_loop import evaluate

    with pytest.raises(ConfigError, match=r"eval split is empty; .*datasets\.vla_data\.holdout_episodes > 0"):
        evaluate(None, SimpleNamespace(parts=[], frame_decoder=None), 4, tmp_path / "out")


def test_open_loop_names_an_unknown_mixture(tiny_ckpt, tiny_robotwin_root, tmp_path, capsys):
    from DiT4DiT.evaluation.open_loop import main

    code = main(["--ckpt", str(tiny_ckpt), "--data_root_dir", str(tiny_robotwin_root), "--data_mix", "robotwn",
                 "--out", str(tmp_path / "o"), "--device", "cpu", "--cache_dir", str(tmp_path / "cache")])
    assert code == 2 and "robotwn" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# --- ensembling -----------------------------------------------------------------------------------------------

def test_adaptive_ensembling_matches_a_hand_computed_case():
    ensembler = AdaptiveEnsembler(horizon=2, alpha=1.0)
    first = np.array([[1.0, 0.0], [1.0, 0.0], [7.0, 7.0]])
    second = np.array([[0.0, 2.0], [9.0, 9.0], [9.0, 9.0]])
    np.testing.assert_allclose(ensembler(first), [1.0, 0.0])  # one chunk: its first row
    # Now the step is covered by first[1] = (1, 0) and second[0] = (0, 2): cosines to the newest are 0 and 1,
    # weights e^0 : e^1, so the action is ((1, 0) + e (0, 2)) / (1 + e).
    e = math.e
    np.testing.assert_allclose(ensembler(second), [1 / (1 + e), 2 * e / (1 + e)], rtol=1e-6)
    # The horizon keeps two chunks: the third call blends second[1] and third[0] only.
    third = np.array([[9.0, 9.0], [0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(ensembler(third), [9.0, 9.0], rtol=1e-6)


def test_alpha_zero_is_the_plain_mean_and_reset_forgets():
    ensembler = AdaptiveEnsembler(horizon=3, alpha=0.0)
    chunks = [np.full((4, 2), float(k)) + np.arange(4)[:, None] for k in range(3)]
    outs = [ensembler(c) for c in chunks]
    # Row r of chunk k is k + r. At the third call the step is covered by chunk0[2], chunk1[1] and chunk2[0]:
    # 2, 2 and 2; at the second by chunk0[1] = 1 and chunk1[0] = 1.
    np.testing.assert_allclose(outs[1], [1.0, 1.0])
    np.testing.assert_allclose(outs[2], [2.0, 2.0])
    ensembler.reset()
    np.testing.assert_allclose(ensembler(chunks[1]), chunks[1][0])


def test_a_horizon_longer_than_the_chunk_is_refused():
    with pytest.raises(BadArgument, match="--ensemble_horizon 5: a 4-step chunk cannot cover it; use at most 4"):
        AdaptiveEnsembler(horizon=5)(np.zeros((4, 2)))


# --- adapters against fake environments, through the real server ------------------------------------------

class RecordingClient:
    """Our client, keeping every request and reply so a test can follow what the environment received."""

    def __init__(self, client: PolicyClient):
        self.client, self.metadata = client, client.metadata
        self.requests, self.replies = [], []

    def infer(self, examples):
        self.requests.append(examples)
        self.replies.append(self.client.infer(examples))
        return self.replies[-1]


@pytest.fixture(scope="module")
def recording_client(tiny_policy):
    with running_server(tiny_policy) as server, PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
        yield lambda: RecordingClient(client)


class FakeLiberoEnv:
    """LIBERO's OffScreenRenderEnv interface (reset, set_init_state, step -> obs, reward, done, info).

    Trial k succeeds on its env step `succeed_at[k]` (None: never). The agent view is dark on top and bright below
    (so the 180-degree turn is visible), the wrist view grey. The gripper reports 8 joint values so that the state
    is 14 wide, as the tiny run (trained on RoboTwin) expects.
    """

    def __init__(self, succeed_at):
        self.succeed_at, self.actions = list(succeed_at), []

    def reset(self):
        self.actions.append([])

    def set_init_state(self, state):
        return self._obs()

    def step(self, action):
        self.actions[-1].append(list(action))
        target = self.succeed_at[len(self.actions) - 1]
        return self._obs(), 0.0, target is not None and len(self.actions[-1]) >= target, {}

    @staticmethod
    def _obs():
        agent = np.zeros((256, 256, 3), np.uint8)
        agent[128:] = 255
        return {"agentview_image": agent, "robot0_eye_in_hand_image": np.full((256, 256, 3), 100, np.uint8),
                "robot0_eef_pos": np.array([0.1, 0.2, 0.3]), "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
                "robot0_gripper_qpos": np.full(8, 0.5)}


def normalized_by_hand(raw, section) -> np.ndarray:
    low, high = np.asarray(section["min"]), np.asarray(section["max"])
    binary = np.asarray(section["normalization"]) == "binary"
    return np.where(binary, (raw > 0.5).astype(float), 2 * (raw - low) / (high - low) - 1)


def test_libero_adapter_executes_each_chunk_in_order(recording_client):
    client = recording_client()
    env = FakeLiberoEnv(succeed_at=[None, 11])
    outcomes = run_libero_task(LiberoPolicy(client), env, "place the bottle", init_states=[0, 1], trials=range(2),
                               max_steps=20, num_steps_wait=3, task_key=(7, 3))
    assert outcomes == [False, True]
    # Trial 0: 3 waiting steps, then 20 policy steps = chunks at steps 0, 8, 16; trial 1 stops after 8 policy steps.
    assert len(client.replies) == 4
    assert [len(a) for a in env.actions] == [23, 11]
    assert all(step == [0.0] * 6 + [-1.0] for trial in env.actions for step in trial[:3])
    executed = [step for trial in env.actions for step in trial[3:]]
    planned = [row for reply in client.replies for row in reply["actions"][0]]
    planned = planned[:20] + planned[24:32]  # trial 0 executed 20 of its 24 planned rows, trial 1 all 8 of its chunk
    for done, row in zip(executed, planned):
        np.testing.assert_allclose(done[:6], row[:6], rtol=1e-6)
        assert done[6] == (-1.0 if row[6] > 0.5 else 1.0)
    request = client.requests[0][0]
    image = request["image"][0]
    assert image.shape == (32, 64, 3)  # two views at the run's 32 pixels, side by side
    assert image[0, 0, 0] == 255 and image[-1, 0, 0] == 0 and np.all(image[:, 32:] == 100)
    raw_state = np.array([0.1, 0.2, 0.3, 0, 0, 0, *[0.5] * 8])
    expected = normalized_by_hand(raw_state, client.metadata["statistics"]["state"])
    np.testing.assert_allclose(request["state"][0], expected, rtol=1e-5, atol=1e-6)
    # Each request's noise seed is made from (run seed, task id, trial) and the policy step that asks for the chunk.
    seeds = [examples[0]["seed"] for examples in client.requests]
    assert seeds == [request_seed((7, 3, 0), 0), request_seed((7, 3, 0), 8), request_seed((7, 3, 0), 16),
                     request_seed((7, 3, 1), 0)]
    assert len(set(seeds)) == 4 and all(0 <= seed < 2**63 for seed in seeds)


def test_a_libero_trial_gets_the_same_actions_whatever_ran_before_it(recording_client):
    """Trial 1 alone (as a second environment process would run it) executes what it did after trial 0."""
    runs = []
    for trials in (range(2), [1]):
        env = FakeLiberoEnv(succeed_at=[None, None])
        run_libero_task(LiberoPolicy(recording_client()), env, "place the bottle", init_states=[0, 1], trials=trials,
                        max_steps=10, num_steps_wait=0, task_key=(7, 0))
        runs.append(env.actions)
    serial, alone = runs
    assert alone[0] == serial[1]
    assert serial[0] != serial[1]  # another trial's seeds give other actions: the equality above is not a constant


def test_quaternion_to_axis_angle_by_hand():
    half = math.pi / 4  # a quarter turn about z
    np.testing.assert_allclose(quaternion_to_axis_angle([0, 0, math.sin(half), math.cos(half)]), [0, 0, math.pi / 2])
    np.testing.assert_allclose(quaternion_to_axis_angle([0, 0, 0, 1]), [0, 0, 0])


class FakeRobocasaEnv:
    """A gymnasium vector env of 2 (reset -> obs, info; step -> obs, rewards, terminations, truncations, info).

    Env 0's episodes last 2 steps and succeed on their first; env 1's last 3 and never succeed.
    """

    lengths, succeeds = (2, 3), (True, False)

    def __init__(self):
        self.t, self.steps = [0, 0], []

    def _obs(self):
        obs = {"video.ego_view": np.full((2, 1, 40, 40, 3), 50, np.uint8),
               "annotation.human.coarse_action": ("pick the cup", "open the drawer")}
        for name, width in ROBOTWIN_PARTS:
            obs[f"state.{name}"] = np.full((2, 1, width), 0.25)
        return obs

    def reset(self):
        return self._obs(), {}

    def step(self, actions):
        self.steps.append(actions)
        success = np.array([[self.succeeds[i] and self.t[i] == 0] for i in range(2)])
        self.t = [t + 1 for t in self.t]
        ended = np.array([self.t[i] == self.lengths[i] for i in range(2)])
        self.t = [0 if ended[i] else self.t[i] for i in range(2)]
        return self._obs(), np.zeros(2), ended, np.zeros(2, bool), {"success": success}


def test_robocasa_adapter_sends_the_batch_and_executes_the_first_steps_of_each_chunk(recording_client):
    client = recording_client()
    env = FakeRobocasaEnv()
    outcomes = run_robocasa(RobocasaPolicy(client, n_action_steps=3, parts=ROBOTWIN_PARTS), env, n_episodes=3)
    assert outcomes == [True, False, True]  # env 0 ends at steps 2 and 4, env 1 at step 3
    assert len(env.steps) == len(client.replies) == 4
    assert [ex["lang"] for ex in client.requests[0]] == ["pick the cup", "open the drawer"]
    assert client.requests[0][0]["image"][0].shape == (32, 32, 3)
    for sent, reply in zip(env.steps, client.replies):
        start = 0
        for name, width in ROBOTWIN_PARTS:
            assert sent[f"action.{name}"].shape == (2, 3, width)
            np.testing.assert_allclose(sent[f"action.{name}"], reply["actions"][:, :3, start:start + width], rtol=1e-6)
            start += width


def test_robocasa_ensembling_keeps_one_history_per_environment(recording_client):
    client = recording_client()
    policy = RobocasaPolicy(client, n_action_steps=3, parts=ROBOTWIN_PARTS, ensemble_horizon=2, alpha=0.1)
    obs = FakeRobocasaEnv()._obs()
    first = policy.act(obs)
    assert first["action.left_joints"].shape == (2, 1, 6)
    np.testing.assert_allclose(first["action.left_joints"][:, 0], client.replies[0]["actions"][:, 0, :6], rtol=1e-6)
    policy.act(obs)
    policy.reset_env(0)  # env 0 starts a new episode: only its history is dropped
    third = policy.act(obs)
    latest = client.replies[2]["actions"]
    np.testing.assert_allclose(third["action.left_joints"][0, 0], latest[0, 0, :6], rtol=1e-6)
    assert not np.allclose(third["action.left_joints"][1, 0], latest[1, 0, :6])


def test_robocasa_adapter_refuses_parts_that_do_not_add_up(recording_client):
    with pytest.raises(SimulatorError, match="add up to 29"):
        RobocasaPolicy(recording_client(), n_action_steps=2)  # the GR1 layout against a 14-dim model


# --- success-rate summaries ---------------------------------------------------------------------------------

def test_success_rates_are_summarised_per_task_suite_and_overall(tmp_path):
    write_task_result(tmp_path, "libero_goal", "open the drawer", [True, True, False, True])
    write_task_result(tmp_path, "libero_goal", "put the bowl/plate away", [False, False])
    write_task_result(tmp_path, "libero_10", "stack cups", [True])
    summary = summarize(tmp_path)
    assert summary["tasks"] == 3 and summary["episodes"] == 7
    assert summary["per_task"]["libero_goal/open the drawer"] == 0.75
    assert summary["suites"] == {"libero_10": 1.0, "libero_goal": 0.375}
    assert math.isclose(summary["average_success_rate"], (0.75 + 0 + 1) / 3)
    assert (summary["highest"], summary["lowest"]) == (1.0, 0.0)
    assert json.loads((tmp_path / "success_rate_summary.json").read_text()) == summary
    assert "Average success rate: 0.5833 (58.33%)" in (tmp_path / "success_rate_summary.txt").read_text()


def test_summarising_an_empty_folder_says_what_is_missing(tmp_path, capsys):
    assert summary_main(["--log_dir", str(tmp_path)]) == 2
    assert "no *.result.json task results" in capsys.readouterr().err


def test_libero_task_results_are_written_in_task_order_whichever_process_finishes_first(tmp_path):
    from DiT4DiT.evaluation.libero import LiberoRun, TaskLog

    run = LiberoRun("libero_spatial", (3, 5), 2, 220, 10, 7, 1, False, "127.0.0.1:1", 1.0, str(tmp_path))
    log = TaskLog(tmp_path, run, ["open the drawer", "close the drawer"])
    # Two processes, each with trial block 0 or 1 of both tasks: episodes 1 and 3 (process 1) end first.
    for episode, won in ((1, True), (3, False), (0, False)):
        log.add(episode, {"success": won})
    assert log.written == 1 and not (tmp_path / "libero_spatial__close_the_drawer.result.json").exists()
    log.add(2, {"success": True})
    assert log.written == 2 and log.outcomes == [False, True, True, False]
    lines = [line.split(" INFO ", 1)[1] for line in (tmp_path / "eval_libero_libero_spatial.log").read_text().splitlines()]
    assert lines == ["Task: open the drawer", "Current task success rate: 0.5", "Current total success rate: 0.5",
                     "Task: close the drawer", "Current task success rate: 0.5", "Current total success rate: 0.5"]
    result = json.loads((tmp_path / "libero_spatial__open_the_drawer.result.json").read_text())
    assert result["outcomes"] == [False, True]
