"""The original's mixtures and data configs on tiny generated data: sin/cos state, raw keys, LeRobot v3.0 folders."""

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.dataloader import Normalizer
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.mixtures import DATASET_NAMED_MIXTURES
from DiT4DiT.tools.tiny_dataset import generate
from helpers.fixtures_data import dataset_of, snapshot
from helpers.in_process import call_main

ORIGINAL_MIXTURES = (
    "custom_dataset", "custom_dataset_2", "libero_all", "bridge", "bridge_rt_1", "demo_sim_pick_place",
    "fourier_gr1_unified_1000", "fourier_gr1_pretrain_10K", "BEHAVIOR_challenge", "SO101_pick", "arx_x5",
    "robotwin_all", "robotwin_all_50", "robotwin", "robotwin_task1", "robotwin_task2", "multi_robot", "real_robot_all",
)
ORIGINAL_DATA_CONFIGS = (
    "libero_franka", "oxe_droid", "oxe_bridge", "oxe_rt1", "SO101", "demo_sim_franka_delta_joints", "arx_x5",
    "robotwin", "robotwin50", "fourier_gr1_arms_waist", "custom_robot_config", "g1_body29_aloha_arms_only",
)
WIDE = ["datasets.vla_data.max_state_dim=64", "datasets.vla_data.max_action_dim=32", "datasets.vla_data.image_size=32"]


def test_every_original_mixture_and_data_config_exists():
    assert set(ORIGINAL_MIXTURES) < set(DATASET_NAMED_MIXTURES)
    assert set(ORIGINAL_DATA_CONFIGS) < set(DATA_CONFIGS)
    named = {e.data_config for name in ORIGINAL_MIXTURES for e in DATASET_NAMED_MIXTURES[name]}
    assert named - set(DATA_CONFIGS) == {"R1Pro"}  # the original names it without defining it
    assert len(DATASET_NAMED_MIXTURES["fourier_gr1_unified_1000"]) == 24
    assert DATASET_NAMED_MIXTURES["robotwin_all"][50].dataset == "Randomized/adjust_bottle"  # the original's order
    tags = {name: DATA_CONFIGS[name].embodiment_tag for name in ("libero_franka", "fourier_gr1_arms_waist", "oxe_rt1",
                                                                 "g1_body29_aloha_arms_only", "robotwin")}
    assert tags == {"libero_franka": "franka", "fourier_gr1_arms_waist": "gr1", "oxe_rt1": "oxe_rt1",
                    "g1_body29_aloha_arms_only": "new_embodiment", "robotwin": "new_embodiment"}


def test_a_mixture_naming_an_undefined_data_config_says_so(tmp_path, data_cfg):
    (tmp_path / "BEHAVIOR_challenge").mkdir()
    with pytest.raises(ConfigError, match="names data config 'R1Pro', which does not exist"):
        dataset_of(data_cfg(tmp_path, "BEHAVIOR_challenge"))


@pytest.fixture(scope="module")
def libero_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("libero")
    generate("libero_all", root, datasets=1, episodes=2, frames=(10, 12))
    return root


def test_libero_state_is_sin_cos_of_each_key_and_the_gripper_action_stays_raw(libero_root, data_cfg):
    ds = dataset_of(data_cfg(libero_root, "libero_all", *WIDE, "datasets.vla_data.holdout_episodes=0"))
    folder = libero_root / "libero_object_no_noops_1.0.0_lerobot"
    tables = [pq.read_table(p).to_pydict() for p in sorted(folder.glob("data/*/*.parquet"))]
    stats = ds.statistics()["franka"]
    for index in (0, 7, len(ds) - 1):
        ex = ds[index]
        episode, t = ds.parts[0].locate(ds.choose(index)[1])
        raw_state = np.asarray(tables[episode]["observation.state"][t], dtype=np.float64)
        # Eight 1-dim keys, each [sin, cos] in place: sin(x), cos(x), sin(y), cos(y), ...
        expected = np.stack([np.sin(raw_state), np.cos(raw_state)], axis=1).reshape(-1)
        np.testing.assert_allclose(ex["state"][0, :16], expected, atol=1e-6)
        assert ex["state_mask"][0, :16].all() and not ex["state_mask"][0, 16:].any()
        raw_action = np.asarray(tables[episode]["action"][t], dtype=np.float64)
        np.testing.assert_allclose(ex["action"][0, 6], raw_action[6], atol=1e-6)  # the gripper: no mode, raw
        low, high = np.asarray(stats["action"]["min"][:6]), np.asarray(stats["action"]["max"][:6])
        np.testing.assert_allclose(ex["action"][0, :6], 2 * (raw_action[:6] - low) / (high - low) - 1, atol=1e-5)
        back = Normalizer.from_statistics(stats["state"]).unnormalize(ex["state"][0, :16])
        np.testing.assert_allclose(back, raw_state, atol=1e-5)
    assert stats["action"]["mask"] == [True] * 6 + [False]
    assert stats["state"]["normalization"] == ["sincos"] * 8 and len(stats["state"]["mean"]) == 8


def test_sin_cos_width_counts_against_max_state_dim(libero_root, data_cfg):
    with pytest.raises(ConfigError, match="gives 16-dim states, more than datasets.vla_data.max_state_dim=8"):
        dataset_of(data_cfg(libero_root, "libero_all", "datasets.vla_data.max_state_dim=8"))


def test_v3_and_v2_folders_with_the_same_content_give_identical_samples(tmp_path, data_cfg):
    """One mixture written as LeRobot v2.1 (a file per episode) and v3.0 (episodes share files): same samples."""
    roots = {}
    for version in ("v2.1", "v3.0"):
        roots[version] = tmp_path / version
        generate("robotwin_task2", roots[version], episodes=3, frames=(9, 14), version=version)
    v3_task = roots["v3.0"] / "place_a2b_left"
    assert json.loads((v3_task / "meta/info.json").read_text())["codebase_version"] == "v3.0"
    assert len(list(v3_task.glob("videos/*/chunk-000/file-000.mp4"))) == 3 and not list(v3_task.glob("meta/*.jsonl"))
    before = snapshot(roots["v3.0"])
    datasets = {v: dataset_of(data_cfg(root, "robotwin_task2", "datasets.vla_data.image_size=32",
                                              "datasets.vla_data.holdout_episodes=0"))
                for v, root in roots.items()}
    assert len(datasets["v2.1"]) == len(datasets["v3.0"]) and datasets["v2.1"].instructions() == datasets["v3.0"].instructions()
    assert datasets["v2.1"].statistics() == datasets["v3.0"].statistics()
    seen_episodes = set()
    for index in range(len(datasets["v2.1"])):
        a, b = datasets["v2.1"][index], datasets["v3.0"][index]
        part, step = datasets["v3.0"].choose(index)
        seen_episodes.add(datasets["v3.0"].parts[part].locate(step)[0])
        assert a["lang"] == b["lang"]
        for key in ("action", "state", "action_mask", "state_mask"):
            np.testing.assert_array_equal(a[key], b[key])
        assert all(torch.equal(x, y) for x, y in zip(a["image"], b["image"]))
    assert seen_episodes == {0, 1, 2}  # episodes 1 and 2 start mid-file in the v3.0 videos
    assert snapshot(roots["v3.0"]) == before


def test_command_line_writes_the_first_k_datasets_and_refuses_bad_input(tmp_path):
    from DiT4DiT.tools.tiny_dataset import main

    def run(*args):
        return call_main(main, list(args), dict(os.environ))

    ok = run("--data_mix", "real_robot_all", "--out", str(tmp_path), "--datasets", "2", "--episodes", "1",
             "--min-frames", "4", "--max-frames", "4")
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pnp_corn_middle_drawer", "pnp_eggplant_lh_200ep_26_1_28"]
    modality = json.loads((tmp_path / "pnp_corn_middle_drawer/meta/modality.json").read_text())
    assert modality["state"]["left_gripper"] == {"start": 14, "end": 15}
    assert modality["annotation"] == {"human.task_description": {"original_key": "task_index"}}
    unknown = run("--data_mix", "robotwn", "--out", str(tmp_path / "x"))
    assert unknown.returncode == 2 and "robotwn" in unknown.stderr and not (tmp_path / "x").exists()
    version = run("--data_mix", "robotwin", "--out", str(tmp_path / "y"), "--lerobot_version", "v4")
    assert version.returncode == 2 and "v4" in version.stderr and not (tmp_path / "y").exists()
