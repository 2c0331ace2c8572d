"""The policy's own requests beyond the original's: a state in the robot's units (encoded as training encoded it,
for every normalisation kind), real-time chunking's keys (prev_actions, inference_delay, execution_horizon) and
their checks, the sampler's step count, and per-stage timing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection
from DiT4DiT.config.typed import section
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.model.framework import build_framework
from DiT4DiT.serving.policy import Policy, PolicyShape, RequestError
from DiT4DiT.serving.stage_timing import MODEL_STAGES
from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.fixtures_data import dataset_of
from helpers.fixtures_model import TINY_YAML
from helpers.fixtures_serving import example

MEAN_STD = "SO101_mean_std"  # SO101's keys normalised by mean and std (no data config of the original does)
KINDS = {  # normalisation kind -> a data config whose state uses it
    "min_max and binary": "robotwin",
    "q99": "oxe_bridge",
    "mean_std": MEAN_STD,
    "sincos": "libero_franka",
}
STATE_DIM = 16  # libero_franka's 8 values, sin/cos-encoded


@pytest.fixture(scope="module")
def mean_std_config():
    so101 = DATA_CONFIGS["SO101"]
    DATA_CONFIGS[MEAN_STD] = dataclasses.replace(so101, name=MEAN_STD,
                                                 normalization={k: "mean_std" for k in so101.normalization})
    yield
    del DATA_CONFIGS[MEAN_STD]


@pytest.fixture(scope="module")
def model16(tiny_pipeline_dir, tmp_path_factory):
    """An untrained tiny model with a 16-wide state (the actions only need to depend on the state)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = load_config(TINY_YAML, [f"framework.cosmos25.base_model={tiny_pipeline_dir}",
                                  f"framework.cosmos25.prompt_store_dir={tmp_path_factory.mktemp('store')}",
                                  f"framework.action_model.state_dim={STATE_DIM}",
                                  f"datasets.vla_data.max_state_dim={STATE_DIM}"])
    torch.manual_seed(0)
    model = build_framework(cfg).eval()
    model.requires_grad_(False)
    yield model
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_robot_unit_state_gives_the_actions_of_the_state_training_encoded(kind, model16, mean_std_config,
                                                                           tiny_pipeline_dir, tmp_path):
    data_config = KINDS[kind]
    folder = generate_lerobot(data_config, tmp_path / "data" / data_config, episodes=2, frames=(10, 12))
    cfg = load_config(TINY_YAML, [f"framework.cosmos25.base_model={tiny_pipeline_dir}",
                                  f"datasets.vla_data.data_mix={folder}", f"datasets.vla_data.data_config={data_config}",
                                  f"framework.action_model.state_dim={STATE_DIM}",
                                  f"datasets.vla_data.max_state_dim={STATE_DIM}", "datasets.vla_data.holdout_episodes=0",
                                  f"datasets.vla_data.cache_dir={tmp_path / 'cache'}"])
    dataset = dataset_of(cfg)
    (tag, statistics), = dataset.statistics().items()
    assert kind.split()[0] in statistics["state"]["normalization"]
    shape = PolicyShape.of(section(cfg.framework, FrameworkSection), section(cfg.datasets.vla_data,
                                                                             DatasetsVlaDataSection), 8)
    policy = Policy(model16, shape, tag, statistics)
    assert policy.metadata()["state_units"] == ["normalized", "robot"]
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    for index in (0, 7):
        trained = dataset[index]  # the state as training fed it: normalised and zero-padded
        position, step = dataset.choose(index)
        raw = dataset.parts[position].read(step, dataset.frame_decoder).state
        ask = {"image": [image], "lang": "pick", "seed": 11}
        robot = policy.check({"examples": [{**ask, "state": raw.astype(np.float64), "state_units": "robot"}]})
        normalised = policy.check({"examples": [{**ask, "state": trained["state"]}]})
        assert np.array_equal(robot[0]["state"], trained["state"])
        np.testing.assert_array_equal(policy.infer(robot)["actions"], policy.infer(normalised)["actions"])


def test_robot_units_against_statistics_that_cannot_encode_are_a_clear_error(tiny_policy):
    bare = {tag: {k: v for k, v in section.items() if k != "normalization"} if tag == "state" else section
            for tag, section in tiny_policy.statistics.items()}  # as the original's statistics: no modes
    policy = Policy(tiny_policy.model, tiny_policy.shape, tiny_policy.statistics_tag, bare)
    assert policy.metadata()["state_units"] == ["normalized"]
    with pytest.raises(RequestError, match=r"examples\[0\]\.state_units 'robot': the run's state statistics cannot"):
        policy.check({"examples": [example(0, state=np.zeros(14), state_units="robot")]})
    with pytest.raises(RequestError, match=r"state_units is 'raw'; send 'normalized'"):
        tiny_policy.check({"examples": [example(0, state_units="raw")]})
    with pytest.raises(RequestError, match=r"state: the robot state has 5 values but the run's statistics describe 14"):
        tiny_policy.check({"examples": [example(0, state=np.zeros(5), state_units="robot")]})


# --- real-time chunking --------------------------------------------------------------------------------------

def _normalized(policy, *examples) -> np.ndarray:
    return policy.infer(policy.check({"examples": list(examples)}))["normalized_actions"]


def ask(content: int, noise: int, **changes) -> dict:
    """helpers' example `content` (image, state) with its noise seed `noise`."""
    return {**example(content, **changes), "seed": noise}


def test_a_chunk_asked_with_the_previous_one_follows_it_on_the_frozen_rows(tiny_policy):
    previous = _normalized(tiny_policy, ask(0, 1))[0]
    executed, delay = 3, 3  # rows 0..2 ran before the observation; 3 more run while the reply is computed
    leftover = previous[executed:]
    free = _normalized(tiny_policy, ask(0, 2))[0]
    guided = _normalized(tiny_policy, ask(0, 2, prev_actions=leftover, inference_delay=delay))[0]
    free_gap = np.abs(free[:delay] - leftover[:delay]).mean()
    guided_gap = np.abs(guided[:delay] - leftover[:delay]).mean()
    assert guided_gap < 0.1 * free_gap, (guided_gap, free_gap)  # the margin: a tenth (measured: 0.0036)


def test_requests_with_and_without_the_keys_batch_together_and_the_others_are_unchanged(tiny_policy):
    leftover = _normalized(tiny_policy, ask(0, 1))[0, 2:]
    plain = _normalized(tiny_policy, ask(1, 5), ask(2, 6))
    mixed = _normalized(tiny_policy, ask(1, 5),
                        ask(2, 6, prev_actions=leftover, inference_delay=2, execution_horizon=5))
    assert np.array_equal(mixed[0], plain[0])  # bit for bit
    assert not np.array_equal(mixed[1], plain[1])
    alone = _normalized(tiny_policy, ask(1, 5))
    assert np.abs(alone - plain[:1]).max() < 1e-5  # and alone, within what batching may move


@pytest.mark.parametrize("changes, message", [
    ({"prev_actions": np.zeros((3, 14), np.float32)}, r"lacks inference_delay: real-time chunking needs"),
    ({"inference_delay": 2}, r"lacks prev_actions"),
    ({"prev_actions": np.zeros((3, 12), np.float32), "inference_delay": 1},
     r"prev_actions is a float32 array of shape \(3, 12\); send float rows .* \(n, 14\) with n from 1 to the chunk's 8"),
    ({"prev_actions": np.zeros((9, 14), np.float32), "inference_delay": 1}, r"shape \(9, 14\)"),
    ({"prev_actions": [[0.0] * 14], "inference_delay": 0}, r"prev_actions is a list"),
    ({"prev_actions": np.full((3, 14), np.nan, np.float32), "inference_delay": 1}, r"NaN or infinite"),
    ({"prev_actions": np.zeros((3, 14), np.float32), "inference_delay": 4},
     r"inference_delay is 4; give an integer from 0 to 3 \(at most the 3 prev_actions rows and 7"),
    ({"prev_actions": np.zeros((3, 14), np.float32), "inference_delay": True}, r"inference_delay is True"),
    ({"prev_actions": np.zeros((5, 14), np.float32), "inference_delay": 3, "execution_horizon": 2},
     r"execution_horizon is 2; give an integer from 3 to 5"),
])
def test_bad_real_time_chunking_keys_are_named(tiny_policy, changes, message):
    with pytest.raises(RequestError, match=message):
        tiny_policy.check({"examples": [example(0, **changes)]})


def test_a_model_trained_with_rtc_serves_exact_prefixes_up_to_its_max_delay(tiny_policy):
    shape = dataclasses.replace(tiny_policy.shape, exact_prefix=True, max_delay=2)
    policy = Policy(tiny_policy.model, shape, tiny_policy.statistics_tag, tiny_policy.statistics)
    assert policy.metadata()["rtc"] == {"prefix": "exact", "max_delay": 2, "max_guidance_weight": None}
    assert tiny_policy.metadata()["rtc"] == {"prefix": "guided", "max_delay": 7, "max_guidance_weight": 5.0}
    with pytest.raises(RequestError, match=r"from 0 to 2 \(at most the 4 prev_actions rows and 2 "
                                           r"\(framework.action_model.rtc_training.max_delay"):
        policy.check({"examples": [example(0, prev_actions=np.zeros((4, 14), np.float32), inference_delay=3)]})


# --- sampling steps and stage timing ----------------------------------------------------------------------------

def test_the_sampling_step_count_is_a_load_option(tiny_ckpt):
    policy = Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=2, sampling_steps=2)
    assert policy.metadata()["sampling_steps"] == policy.sampling_steps == 2
    default = Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=2)
    assert default.metadata()["sampling_steps"] == 4
    two, four = _normalized(policy, ask(0, 3)), _normalized(default, ask(0, 3))
    assert not np.array_equal(two, four)


def test_a_profiled_policy_times_every_model_stage(tiny_ckpt):
    policy = Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=2, profile=True)
    answer = policy.infer(policy.check({"examples": [ask(0, 3), ask(1, 4)]}))
    stages = answer["stage_ms"]
    assert stages.shape == (2, len(MODEL_STAGES)) and np.array_equal(stages[0], stages[1])
    assert all(value > 0 for value in stages[0]), dict(zip(MODEL_STAGES, stages[0]))
    # Profiling only measures: the actions are the unprofiled policy's.
    plain = Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=2)
    assert np.array_equal(answer["normalized_actions"], _normalized(plain, ask(0, 3), ask(1, 4)))
