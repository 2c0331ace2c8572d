"""The real robot_sim.PickNPlace dataset (GR1), read from a read-only copy through the gr1_pick_place mixture."""

import json

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from DiT4DiT.dataloader import Normalizer
from DiT4DiT.dataloader.video import decode_pyav
from helpers.fixtures_data import dataset_of, snapshot

DIMS = ["datasets.vla_data.max_state_dim=32", "datasets.vla_data.max_action_dim=32"]


@pytest.fixture(scope="module")
def episodes(readonly_picknplace):
    root = readonly_picknplace / "robot_sim.PickNPlace"
    tables = [pq.read_table(p).to_pydict() for p in sorted(root.glob("data/chunk-000/*.parquet"))]
    return [{k: np.asarray(v) for k, v in t.items()} for t in tables]


def _config_order(table, column_group):
    """Independently of the loader: the GR1 arms+hands vectors, honouring modality.json's original_key quirk."""
    state, action = table["observation.state"], table["action"]
    if column_group == "state":  # state.left_arm reads the *action* column (original_key) in this dataset
        return np.concatenate([action[:, 0:7], state[:, 22:29], state[:, 7:13], state[:, 29:35]], axis=1)
    return np.concatenate([action[:, 0:7], action[:, 22:29], action[:, 7:13], action[:, 29:35]], axis=1)


def test_loads_read_only_with_counts_and_language(readonly_picknplace, data_cfg, episodes):
    before = snapshot(readonly_picknplace)
    cfg = data_cfg(readonly_picknplace, "gr1_pick_place", *DIMS)
    train, held = dataset_of(cfg, split="train"), dataset_of(cfg, split="eval")
    assert train.parts[0].episodes.tolist() == [0, 1] and held.parts[0].episodes.tolist() == [2]
    assert len(train.parts[0]) + len(held.parts[0]) == 1356 == sum(len(t["index"]) for t in episodes)
    stats = train.statistics()["gr1"]
    assert stats["num_trajectories"] == 3 and stats["num_transitions"] == 1356
    tasks = {json.loads(line)["task_index"]: json.loads(line)["task"] for line in
             (readonly_picknplace / "robot_sim.PickNPlace/meta/tasks.jsonl").read_text().splitlines()}
    used = {tasks[int(i)] for t in episodes for i in t["annotation.human.action.task_description"]}
    assert train.instructions() == sorted(used) and len(used) == 3
    assert snapshot(readonly_picknplace) == before


def test_statistics_match_an_independent_computation(readonly_picknplace, data_cfg, episodes):
    stats = dataset_of(data_cfg(readonly_picknplace, "gr1_pick_place", *DIMS)).statistics()["gr1"]
    for group in ("state", "action"):
        values = np.concatenate([_config_order(t, group) for t in episodes])
        assert values.shape == (1356, 26)
        expected = {"mean": values.mean(0), "std": values.std(0), "min": values.min(0), "max": values.max(0),
                    "q01": np.quantile(values, 0.01, axis=0), "q99": np.quantile(values, 0.99, axis=0)}
        for name, value in expected.items():
            np.testing.assert_allclose(stats[group][name], value, rtol=1e-9, atol=1e-12, err_msg=f"{group}.{name}")
    assert stats["action"]["mask"] == [True] * 26


def test_samples_have_the_contract_shapes_and_values(readonly_picknplace, data_cfg, episodes):
    ds = dataset_of(data_cfg(readonly_picknplace, "gr1_pick_place", *DIMS))
    stats = ds.statistics()["gr1"]
    for index in (0, 500, len(ds) - 1):
        ex = ds[index]
        assert len(ex["image"]) == 8 and ex["image"][0].shape == (3, 224, 224)
        assert ex["action"].shape == (8, 32) and ex["action_mask"][:, :26].all() and not ex["action_mask"][:, 26:].any()
        assert ex["state"].shape == (1, 32) and ex["state_mask"][0, :26].all()
        part, step = ds.choose(index)
        episode, t = ds.parts[part].locate(step)
        table = episodes[episode]
        assert ex["lang"] == ds.parts[0].layout.tasks[int(table["annotation.human.action.task_description"][t])]
        raw_state = _config_order(table, "state")[t]
        np.testing.assert_allclose(Normalizer.from_statistics(stats["state"]).unnormalize(ex["state"][0, :26]),
                                   raw_state, atol=1e-5)
        rows = np.minimum(t + np.arange(8), len(table["index"]) - 1)
        np.testing.assert_allclose(Normalizer.from_statistics(stats["action"]).unnormalize(ex["action"][:, :26]),
                                   _config_order(table, "action")[rows], atol=1e-5)


def test_seeked_decode_equals_a_full_decode(readonly_picknplace, episodes):
    """Frames fetched by seeking equal the nearest frames of a decode of the whole file (same decoder)."""
    root = readonly_picknplace / "robot_sim.PickNPlace"
    path = root / "videos/chunk-000/observation.images.ego_view/episode_000001.mp4"
    with av.open(str(path)) as container:
        decoded = [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    times = np.array([t for t, _ in decoded])
    timestamps = episodes[1]["timestamp"][[3, 260, 261, 300, 469]]  # across the keyframe at 250, and the last row
    frames = decode_pyav(path, timestamps, fps=20.0, episode=1)
    for frame, wanted in zip(frames, timestamps):
        np.testing.assert_array_equal(frame, decoded[int(np.abs(times - wanted).argmin())][1])
