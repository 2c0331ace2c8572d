"""Datasets as lerobot writes them (no modality.json, v3.0 with several files, images instead of videos), given
by path, folder or mixture file; modality derived from info.json; padding marked; statistics; start-up lines."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.dataloader import DataError
from DiT4DiT.dataloader.modality import derive_modality
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.tools import modality as modality_tool
from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.fixtures_data import dataset_of, make_read_only, make_writable, snapshot
from helpers.fixtures_model import TINY_BACKBONE

LIBERO = ("datasets.vla_data.max_state_dim=16", "datasets.vla_data.max_action_dim=14")


@pytest.fixture(scope="session")
def lerobot_sets(tmp_path_factory):
    """The same robotwin recording as lerobot writes it four ways, plus a LIBERO one; read-only."""
    root = tmp_path_factory.mktemp("lerobot")
    sets = {
        "v3_videos": generate_lerobot("robotwin", root / "bimanual" / "my bimanual set", episodes_per_file=2),
        "v3_images": generate_lerobot("robotwin", root / "bimanual" / "v3_images", images=True, episodes_per_file=2),
        "v2_videos": generate_lerobot("robotwin", root / "bimanual" / "v2_videos", version="v2.1"),
        "v2_images": generate_lerobot("robotwin", root / "bimanual" / "v2_images", version="v2.1", images=True),
        "libero": generate_lerobot("libero_franka", root / "franka_set"),
    }
    make_read_only(root)
    yield sets
    make_writable(root)


@pytest.fixture
def copy_of(lerobot_sets, tmp_path):
    def copy(name):
        target = tmp_path / "copies" / name
        shutil.copytree(lerobot_sets[name], target)
        make_writable(target)
        return target
    return copy


def _build(data_cfg, data_mix, *overrides, split="train"):
    return dataset_of(data_cfg("null", str(data_mix), *overrides), split=split)


def test_lerobot_v3_dataset_by_path_derives_modality_in_the_cache_only(lerobot_sets, data_cfg, tmp_path, caplog):
    folder = lerobot_sets["v3_videos"]
    assert not (folder / "meta" / "modality.json").exists()
    assert len(list((folder / "data" / "chunk-000").glob("file-*.parquet"))) == 2
    before = snapshot(folder)
    with caplog.at_level(logging.INFO):
        ds = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")
    assert snapshot(folder) == before  # nothing written into the dataset
    cached = list((tmp_path / "cache" / "modality").glob("*.json"))
    assert len(cached) == 1
    assert json.loads(cached[0].read_text()) == derive_modality(
        json.loads((folder / "meta/info.json").read_text()), DATA_CONFIGS["robotwin"], folder)
    assert caplog.text.count("no meta/modality.json; derived") == 1
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("dataset "))
    for words in ("LeRobot v3.0", "3 episodes (1 held out for the eval action MSE", "data config robotwin",
                  "cam_high 48x64 video", "combined side_by_side", "modality derived for robotwin",
                  "statistics computed over", "its meta/stats.json is not used"):
        assert words in line, line
    sample = ds[0]
    assert sample["action"].shape == (8, 14) and sample["image"][0].shape == (3, 224, 672)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")
    assert "derived from meta/info.json" not in caplog.text  # logged once, then read from the cache


def test_the_modality_tool_prints_what_training_derives(lerobot_sets, tmp_path, capsys):
    folder = lerobot_sets["v3_videos"]
    assert modality_tool.main([str(folder), "--data_config", "robotwin"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == derive_modality(json.loads((folder / "meta/info.json").read_text()), DATA_CONFIGS["robotwin"],
                                      folder)
    assert printed["state"]["left_gripper"] == {"start": 6, "end": 7}  # RoboTwin's stored order [L6, Lg, R6, Rg]
    out = tmp_path / "modality.json"
    assert modality_tool.main([str(folder), "--data_config", "robotwin", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == printed
    assert modality_tool.main([str(folder), "--data_config", "robotwin", "--out", str(folder / "m.json")]) == 2  # refused: --out lies inside the dataset (tests/test_tool_outputs.py)
    assert modality_tool.main([str(lerobot_sets["libero"]), "--data_config", "robotwin"]) == 1
    assert "needs camera 'observation.images.cam_high'" in capsys.readouterr().err


def test_an_explicit_modality_json_wins(copy_of, data_cfg):
    folder = copy_of("v3_videos")
    modality = derive_modality(json.loads((folder / "meta/info.json").read_text()), DATA_CONFIGS["robotwin"], folder)
    # Swap the grippers: the data then reads the right gripper where the left one was.
    modality["state"]["left_gripper"], modality["state"]["right_gripper"] = (modality["state"]["right_gripper"],
                                                                           modality["state"]["left_gripper"])
    (folder / "meta/modality.json").write_text(json.dumps(modality))
    ds = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")
    assert ds.parts[0].state_slices[2].start == 13  # state.left_gripper, from the file


def test_auto_picks_the_one_fitting_config_or_lists_the_candidates(lerobot_sets, data_cfg):
    ds = _build(data_cfg, lerobot_sets["libero"], *LIBERO)
    assert ds.parts[0].config.name == "libero_franka"
    with pytest.raises(DataError, match=r"data_config=auto needs exactly one data config that fits this dataset, but "
                                        r"these fit: robotwin, robotwin50, arx_x5; set datasets.vla_data.data_config"):
        _build(data_cfg, lerobot_sets["v3_videos"])


def test_unmappable_features_name_the_feature_its_shape_and_the_expectation(copy_of, data_cfg):
    folder = copy_of("v3_videos")
    info = json.loads((folder / "meta/info.json").read_text())
    info["features"]["action"]["shape"] = [7]
    (folder / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match=r"feature 'action' has shape \[7\], but data config 'robotwin' expects 14 "
                                        r"values \(left_joints 6, left_gripper 1, right_joints 6, right_gripper 1\)"):
        _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")


def test_a_folder_of_datasets_and_a_mixture_file(lerobot_sets, data_cfg, tmp_path):
    folder = lerobot_sets["v3_videos"].parent
    ds = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin", "datasets.vla_data.views=side_by_side")
    assert sorted(p.layout.root.name for p in ds.parts) == sorted(p.name for p in folder.iterdir())
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(f"- {{path: '{lerobot_sets['v3_videos']}', weight: 1.0, data_config: robotwin}}\n"
                       f"- {{path: '{lerobot_sets['libero']}', weight: 0.5, data_config: libero_franka}}\n")
    mixed = _build(data_cfg, mixture, *LIBERO)
    assert [p.config.name for p in mixed.parts] == ["robotwin", "libero_franka"]
    np.testing.assert_allclose(mixed.weights, [2 / 3, 1 / 3])
    # The original's length: the weight-1.0 dataset is visited once per epoch on average.
    assert len(mixed) == round(len(mixed.parts[0]) / (2 / 3))


@pytest.mark.parametrize("text, words", [
    ("- {path: nowhere}\n", "is not a LeRobot dataset folder"),
    ("- {path: x, weight: -1}\n", "weight -1 must be a positive number"),
    ("- {path: x, wieght: 1}\n", "unknown key(s) ['wieght']"),
    ("{path: x}\n", "non-empty YAML list"),
])
def test_bad_mixture_files_are_config_errors(text, words, data_cfg, tmp_path):
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(text)
    with pytest.raises(ConfigError) as error:
        _build(data_cfg, mixture)
    assert words in str(error.value)


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_image_datasets_give_the_samples_of_the_same_data_written_as_videos(lerobot_sets, data_cfg, version):
    overrides = ("datasets.vla_data.data_config=robotwin", "datasets.vla_data.holdout_episodes=0")
    images = _build(data_cfg, lerobot_sets[f"{version}_images"], *overrides)
    videos = _build(data_cfg, lerobot_sets[f"{version}_videos"], *overrides)
    assert len(images) == len(videos)
    for index in (0, 7, len(images) - 1):
        a, b = images[index], videos[index]
        assert a["lang"] == b["lang"]
        np.testing.assert_array_equal(a["action"], b["action"])
        np.testing.assert_array_equal(a["state"], b["state"])
        # The videos went through yuv420p (chroma at half resolution); the PNGs hold the rendered RGB.
        difference = (torch.stack(a["image"]) - torch.stack(b["image"])).abs()
        assert difference.mean() < 0.01 and difference.max() < 0.25


def _lerobot_action_is_pad(frame: int, length: int, horizon: int) -> np.ndarray:
    """lerobot's rule for delta_timestamps query indices: padded where the index leaves [ep_start, ep_end)."""
    query = frame + np.arange(horizon)
    return (query < 0) | (query >= length)


def test_mask_padded_actions_follows_lerobots_action_is_pad_at_an_episode_end(lerobot_sets, data_cfg):
    folder = lerobot_sets["v2_videos"]
    on = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin", "datasets.vla_data.mask_padded_actions=true")
    off = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")
    checked = 0
    for index in range(len(on)):
        part, step = on.choose(index)
        episode, frame = on.parts[part].locate(step)
        length = on.parts[part].layout.episodes[episode]
        if frame + 8 <= length:
            continue
        sample = on[index]
        expected = ~_lerobot_action_is_pad(frame, length, 8)
        np.testing.assert_array_equal(sample["action_mask"][:, :14], np.repeat(expected[:, None], 14, axis=1))
        assert not sample["action_mask"][:, 14:].any()
        assert off[index]["action_mask"][:, :14].all()  # the original's behaviour: no mask
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_statistics_from_the_dataset_stats_json(lerobot_sets, data_cfg):
    folder = lerobot_sets["v2_videos"]
    stored = json.loads((folder / "meta/stats.json").read_text())
    ds = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin", "datasets.vla_data.statistics=dataset")
    computed = _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")
    state = ds.statistics()["new_embodiment"]["state"]
    # Our output order is [L6, R6, Lg, Rg]; stats.json holds the stored order [L6, Lg, R6, Rg].
    order = [*range(6), *range(7, 13), 6, 13]
    np.testing.assert_allclose(state["q99"], np.asarray(stored["observation.state"]["q99"])[order])
    assert computed.statistics()["new_embodiment"]["state"]["q99"] != state["q99"]  # exact over every row


def test_v3_without_episode_tables_names_finalize(copy_of, data_cfg):
    folder = copy_of("v3_videos")
    shutil.rmtree(folder / "meta" / "episodes")
    with pytest.raises(DataError, match=r"not finalised; call dataset\.finalize\(\)"):
        _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")


def test_channel_first_shapes_give_no_resolution_warning(copy_of, data_cfg, caplog):
    folder = copy_of("v2_videos")
    info = json.loads((folder / "meta/info.json").read_text())
    for key, feature in info["features"].items():
        if feature["dtype"] == "video":
            feature["shape"], feature["names"] = [3, 48, 64], ["channels", "height", "width"]
    (folder / "meta/info.json").write_text(json.dumps(info))
    with caplog.at_level(logging.WARNING):
        _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")
    assert "differ from meta/info.json's size" not in caplog.text


def test_as_frames_puts_cameras_after_each_other_in_time(tmp_path, data_cfg):
    folder = generate_lerobot("demo_sim_franka_delta_joints", tmp_path / "franka_two_views")
    overrides = ("datasets.vla_data.max_state_dim=14", "datasets.vla_data.max_action_dim=14")
    frames = _build(data_cfg, folder, "datasets.vla_data.data_config=demo_sim_franka_delta_joints", *overrides)
    wide = _build(data_cfg, folder, "datasets.vla_data.data_config=demo_sim_franka_delta_joints",
                  "datasets.vla_data.views=side_by_side", *overrides)
    assert frames.views == "as_frames" and wide.views == "side_by_side"
    a, b = frames[3]["image"], wide[3]["image"]
    assert (len(a), a[0].shape, len(b), b[0].shape) == (16, (3, 224, 224), 8, (3, 224, 448))
    for t in range(8):  # camera 1's frame t is the left half of the wide frame, camera 2's the right half
        torch.testing.assert_close(a[t], b[t][..., :224])
        torch.testing.assert_close(a[8 + t], b[t][..., 224:])
    assert frames.statistics()["franka"]["views"] == "as_frames"


def test_an_image_camera_without_its_column_is_found_before_step_1(copy_of, data_cfg):
    folder = copy_of("v2_images")
    path = folder / "data/chunk-000/episode_000002.parquet"
    pq.write_table(pq.read_table(path).drop(["observation.images.cam_left_wrist"]), path)
    with pytest.raises(DataError, match=r"episode_000002\.parquet: info.json gives camera\(s\) "
                                        r"\['observation.images.cam_left_wrist'\] dtype 'image', but the file has no"):
        _build(data_cfg, folder, "datasets.vla_data.data_config=robotwin")


def test_the_doctor_and_the_config_check_resolve_a_path_data_mix(lerobot_sets, data_cfg, tmp_path, tiny_pipeline_dir):
    from DiT4DiT.training.input_checks import validate_training_config
    from DiT4DiT.memory.estimate import mixture_views
    from DiT4DiT.serving.policy import MAX_VIEWS_UNKNOWN, camera_count

    assert mixture_views(str(lerobot_sets["v3_videos"]), "robotwin") == 3
    assert mixture_views(str(lerobot_sets["libero"])) == 2  # auto: libero_franka
    missing = tmp_path / "not_there"
    # The policy server counts the same cameras (it once read named mixtures only and took 8 for any path).
    assert camera_count(str(lerobot_sets["libero"]), "auto") == 2 and camera_count("robotwin", "auto") == 3
    assert camera_count(str(missing), "auto") == MAX_VIEWS_UNKNOWN
    with pytest.raises(ConfigError, match=rf"data_mix={missing}: {missing} does not exist; give a dataset folder"):
        validate_training_config(data_cfg("null", str(missing), "framework.cosmos25.base_model=/"))
    # A path needs no data_root_dir.
    validate_training_config(data_cfg("null", str(lerobot_sets["v3_videos"]), f"framework.cosmos25.base_model={tiny_pipeline_dir}",
                                      *TINY_BACKBONE))
