"""The synthetic RoboTwin dataset through the robotwin mixtures: samples, padding, statistics, determinism, cache."""

import json
import logging

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.dataloader import Normalizer, collate_fn, save_dataset_statistics
from helpers.fixtures_data import dataset_of, snapshot

# modality.json raw order is [L6, Lg, R6, Rg]; the robotwin data config outputs [L6, R6, Lg, Rg].
RAW_TO_CONFIG = [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 6, 13]


def _parquet(ds, part, episode):
    table = pq.read_table(ds.parts[part].layout.parquet_path(episode)).to_pydict()
    return {k: np.asarray(v) for k, v in table.items()}


def test_robotwin_mixture_finds_three_tasks_with_one_warning(tiny_robotwin_root, data_cfg, caplog):
    before = snapshot(tiny_robotwin_root)
    with caplog.at_level(logging.WARNING):
        ds = dataset_of(data_cfg(tiny_robotwin_root, "robotwin"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "found 3 of 50" in warnings[0].getMessage()
    assert sorted(p.layout.name for p in ds.parts) == ["adjust_bottle", "place_a2b_left", "place_a2b_right"]
    assert len(ds) == 3 * max(len(p) for p in ds.parts)
    assert ds.instructions() == sorted(json.loads(p.layout.meta_path("tasks.jsonl").read_text())["task"]
                                       for p in ds.parts)
    assert snapshot(tiny_robotwin_root) == before


@pytest.mark.parametrize("mix,names", [("robotwin_task1", ["adjust_bottle"]),
                                       ("robotwin_task2", ["place_a2b_left", "place_a2b_right"])])
def test_task_mixtures(tiny_robotwin_root, data_cfg, mix, names, caplog):
    with caplog.at_level(logging.WARNING):
        ds = dataset_of(data_cfg(tiny_robotwin_root, mix))
    assert [p.layout.name for p in ds.parts] == names
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_sample_contract_and_values(tiny_robotwin_root, data_cfg):
    ds = dataset_of(data_cfg(tiny_robotwin_root, "robotwin", "datasets.vla_data.max_action_dim=32",
                                    "datasets.vla_data.max_state_dim=20"))
    stats = ds.statistics()["new_embodiment"]
    action_norm = Normalizer.from_statistics(stats["action"])
    state_norm = Normalizer.from_statistics(stats["state"])
    for index in (0, 7, len(ds) - 1):
        ex = ds[index]
        assert set(ex) == {"image", "lang", "action", "action_mask", "state", "state_mask"}
        assert len(ex["image"]) == 8
        for frame in ex["image"]:
            assert frame.dtype == torch.float32 and frame.shape == (3, 224, 3 * 224)
            assert 0.0 <= frame.min() and frame.max() <= 1.0
        assert ex["action"].dtype == np.float32 and ex["action"].shape == (8, 32)
        assert ex["action_mask"].dtype == np.bool_ and ex["action_mask"][:, :14].all()
        assert not ex["action_mask"][:, 14:].any() and (ex["action"][:, 14:] == 0).all()
        assert ex["state"].shape == (1, 20) and ex["state"].dtype == np.float32
        assert ex["state_mask"][0, :14].all() and not ex["state_mask"][0, 14:].any()
        assert (ex["state"][0, 14:] == 0).all()
        # Independently: the raw rows of that step, in the config's key order.
        part, step = ds.choose(index)
        episode, t = ds.parts[part].locate(step)
        table = _parquet(ds, part, episode)
        rows = np.minimum(t + np.arange(8), len(table["action"]) - 1)
        raw_action = table["action"][rows][:, RAW_TO_CONFIG]
        raw_state = table["observation.state"][t][RAW_TO_CONFIG]
        joints = slice(0, 12)
        np.testing.assert_allclose(action_norm.unnormalize(ex["action"][:, :14])[:, joints], raw_action[:, joints],
                                   atol=1e-5)
        np.testing.assert_allclose(state_norm.unnormalize(ex["state"][:, :14])[0, joints], raw_state[joints], atol=1e-5)
        np.testing.assert_array_equal(ex["action"][:, 12:14], (raw_action[:, 12:14] > 0.5).astype(np.float32))
        assert ex["lang"] == ds.parts[part].layout.tasks[int(table["task_index"][t])]
        # The action is the next state: the chunk's first action is the state of the following row.
        following = table["observation.state"][min(t + 1, len(table["action"]) - 1)][RAW_TO_CONFIG]
        np.testing.assert_allclose(raw_action[0], following)


def test_views_are_side_by_side_primary_first(tiny_robotwin_root, data_cfg):
    ds = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1", "datasets.vla_data.image_size=32",
                                    "datasets.vla_data.video_delta_indices=[0,1,2,3]",
                                    "datasets.vla_data.action_video_freq_ratio=2"))
    ex = ds[3]
    assert len(ex["image"]) == 2 and ex["image"][0].shape == (3, 32, 96)
    # Colours the generator gives each camera's blob: red (cam_high), green (left wrist), blue (right wrist).
    # The background is grey, so the channel standing out most from the pixel's mean is the blob's.
    frame = ex["image"][0]
    excess = (frame - frame.mean(dim=0, keepdim=True)).clamp(min=0)
    dominant = [int(excess[:, :, 32 * v:32 * (v + 1)].sum(dim=(1, 2)).argmax()) for v in range(3)]
    assert dominant == [0, 1, 2]


def test_statistics_match_parquet_and_json_round_trip(tiny_robotwin_root, data_cfg, tmp_path):
    ds = dataset_of(data_cfg(tiny_robotwin_root, "robotwin"))
    stats = ds.statistics()
    assert list(stats) == ["new_embodiment"]
    entry = stats["new_embodiment"]
    tables = [pq.read_table(p).to_pydict() for p in sorted(tiny_robotwin_root.glob("*/data/*/*.parquet"))]
    action = np.concatenate([np.asarray(t["action"]) for t in tables])[:, RAW_TO_CONFIG]
    state = np.concatenate([np.asarray(t["observation.state"]) for t in tables])[:, RAW_TO_CONFIG]
    assert entry["num_transitions"] == len(action) and entry["num_trajectories"] == 9
    for name, values in (("action", action), ("state", state)):
        np.testing.assert_allclose(entry[name]["min"], values.min(0), atol=1e-6)
        np.testing.assert_allclose(entry[name]["max"], values.max(0), atol=1e-6)
        np.testing.assert_allclose(entry[name]["mean"], values.mean(0), atol=1e-5)
        np.testing.assert_allclose(entry[name]["std"], values.std(0), atol=1e-5)
    assert entry["action"]["mask"] == [True] * 12 + [False, False]
    assert entry["action"]["normalization"] == ["min_max"] * 12 + ["binary"] * 2
    path = tmp_path / "run" / "dataset_statistics.json"
    save_dataset_statistics(stats, path)
    assert json.loads(path.read_text()) == stats
    assert [p.name for p in path.parent.iterdir()] == ["dataset_statistics.json"]


def test_items_depend_only_on_seed_epoch_index(tiny_robotwin_root, data_cfg):
    a = dataset_of(data_cfg(tiny_robotwin_root, "robotwin"))
    b = dataset_of(data_cfg(tiny_robotwin_root, "robotwin"))
    picks = [a.choose(i) for i in range(len(a))]
    assert picks == [b.choose(i) for i in range(len(b))]
    np.testing.assert_array_equal(a[5]["action"], b[5]["action"])
    assert len(set(picks)) > len(picks) // 3, "items should spread over the steps"
    b.set_epoch(1)
    assert [b.choose(i) for i in range(len(b))] != picks
    a.set_epoch(1)
    assert [a.choose(i) for i in range(20)] == [b.choose(i) for i in range(20)]
    other_seed = dataset_of(data_cfg(tiny_robotwin_root, "robotwin", "seed=7"))
    assert [other_seed.choose(i) for i in range(len(a))] != picks


def test_eval_split_is_the_last_episodes(tiny_robotwin_root, data_cfg):
    train = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"), split="train")
    held = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"), split="eval")
    assert train.parts[0].episodes.tolist() == [0, 1] and held.parts[0].episodes.tolist() == [2]
    assert held.instructions() == train.instructions()
    everything = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1",
                                            "datasets.vla_data.holdout_episodes=0"), split="eval")
    assert everything.parts[0].episodes.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="split"):
        dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"), split="test")


def test_action_chunk_follows_the_window_or_the_config(tiny_robotwin_root, data_cfg):
    ds = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1",
                                    "framework.action_model.future_action_window_size=15"))
    assert ds[0]["action"].shape == (16, 14)
    with pytest.raises(ConfigError, match=r"robotwin50.*framework\.action_model\.future_action_window_size"):
        dataset_of(data_cfg(tiny_robotwin_root, "robotwin_all_50"))


def test_robotwin_all_reads_clean_and_randomized_folders(tiny_robotwin_root, data_cfg, tmp_path):
    root = tmp_path / "RoboTwin"
    (root / "Clean").mkdir(parents=True)
    (root / "Clean" / "adjust_bottle").symlink_to(tiny_robotwin_root / "adjust_bottle")
    ds = dataset_of(data_cfg(root, "robotwin_all_50", "framework.action_model.future_action_window_size=49"))
    assert [p.layout.root.name for p in ds.parts] == ["adjust_bottle"]
    assert ds[0]["action"].shape == (50, 14)


def test_too_small_padding_width_is_a_config_error(tiny_robotwin_root, data_cfg):
    with pytest.raises(ConfigError, match=r"datasets\.vla_data\.max_action_dim=10"):
        dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1", "datasets.vla_data.max_action_dim=10"))
    with pytest.raises(ConfigError, match=r"datasets\.vla_data\.max_state_dim=8"):
        dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1", "datasets.vla_data.max_state_dim=8"))


def test_dataloader_with_workers_gives_lists_of_examples(tiny_robotwin_root, data_cfg):
    ds = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task2"))
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2, collate_fn=collate_fn)
    batch = next(iter(loader))
    assert isinstance(batch, list) and len(batch) == 3
    np.testing.assert_array_equal(batch[1]["action"], ds[1]["action"])
    # Workers resize with one thread, the main process with several: equal up to float rounding.
    torch.testing.assert_close(batch[2]["image"][3], ds[2]["image"][3], atol=1e-6, rtol=0)


def test_index_is_cached_outside_the_dataset(tiny_robotwin_root, data_cfg, tmp_path, caplog, monkeypatch):
    before = snapshot(tiny_robotwin_root)
    with caplog.at_level(logging.INFO, logger="DiT4DiT.dataloader.index"):
        dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"))
        first = [r for r in caplog.records if "scanning" in r.getMessage()]
        caplog.clear()
        dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"))
        second = [r for r in caplog.records if "scanning" in r.getMessage()]
    assert len(first) == 1 and not second
    cached = list((tmp_path / "cache/index").glob("*.json")) + list((tmp_path / "cache/videos").glob("*.json"))
    assert len(cached) == 2 and all(path.name.startswith("adjust_bottle-") for path in cached)  # index, video probes
    assert snapshot(tiny_robotwin_root) == before
    # Without cache_dir the environment variable decides.
    monkeypatch.setenv("DIT4DIT_CACHE_DIR", str(tmp_path / "env_cache"))
    cfg = data_cfg(tiny_robotwin_root, "robotwin_task1", "datasets.vla_data.cache_dir=null")
    dataset_of(cfg)
    assert list((tmp_path / "env_cache").rglob("adjust_bottle-*.json"))
