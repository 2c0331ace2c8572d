"""The LeRobot writer of the data package on episodes recorded elsewhere (as Meta-World's collection hands them
over): what it writes reads back by path with the values given, in both layouts, and a dataset appears whole,
replacing the one written before."""

from __future__ import annotations

import json

import numpy as np
import pytest

from DiT4DiT.dataloader.writer import Episode, Storage, columns_for, video_codec, write_dataset
from helpers.fixtures_data import dataset_of

FRANKA = ("datasets.vla_data.data_config=libero_franka", "datasets.vla_data.max_state_dim=16",
          "datasets.vla_data.max_action_dim=7", "datasets.vla_data.image_size=32",
          "datasets.vla_data.holdout_episodes=0")


def recorded(lengths: list[int], seed: int = 0) -> list[Episode]:
    """Episodes in libero_franka's stored layout: 8 state and 7 action values per step, two 32 px cameras."""
    rng = np.random.default_rng(seed)
    cameras = ("primary_image", "wrist_image")
    return [Episode(rng.uniform(-1, 1, (n, 8)).astype(np.float32), rng.uniform(-1, 1, (n, 7)).astype(np.float32),
                    {cam: rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8) for cam in cameras})
            for n in lengths]


@pytest.mark.parametrize("version, per_file", [("v2.1", None), ("v3.0", 2)])
def test_recorded_episodes_read_back_by_path_with_their_values(tmp_path, data_cfg, version, per_file):
    episodes = recorded([9, 12, 7])
    folder = write_dataset(tmp_path / "data" / "my_demos", columns_for("libero_franka"), episodes, "press the handle",
                           Storage(version=version, episodes_per_file=per_file, fps=20, codec=video_codec()),
                           "recorder")
    assert folder == tmp_path / "data" / "my_demos"
    assert [p.name for p in folder.parent.iterdir()] == ["my_demos"]  # the scratch folder is gone
    info = json.loads((folder / "meta/info.json").read_text())
    assert info["codebase_version"] == version and info["total_frames"] == 28 and info["fps"] == 20
    assert info["features"]["observation.images.wrist_image"]["shape"] == [32, 32, 3]
    dataset = dataset_of(data_cfg(tmp_path, str(folder), *FRANKA))
    stats = dataset.statistics()["franka"]
    assert stats["num_trajectories"] == 3 and stats["num_transitions"] == 28
    actions = np.concatenate([e.action for e in episodes])
    assert np.allclose(stats["action"]["min"], actions.min(0)) and np.allclose(stats["action"]["max"], actions.max(0))
    assert dataset[0]["lang"] == "press the handle"


def test_writing_again_replaces_the_dataset_whole(tmp_path, data_cfg):
    target = tmp_path / "demos"
    columns, storage = columns_for("libero_franka"), Storage(codec=video_codec())
    write_dataset(target, columns, recorded([8, 8, 8]), "first", storage, "recorder")
    write_dataset(target, columns, recorded([10], seed=1), "second", storage, "recorder")
    info = json.loads((target / "meta/info.json").read_text())
    assert info["total_episodes"] == 1 and info["total_frames"] == 10
    assert sorted(p.name for p in (target / "data/chunk-000").iterdir()) == ["episode_000000.parquet"]
    assert [p.name for p in tmp_path.iterdir()] == ["demos"]
    assert dataset_of(data_cfg(tmp_path, str(target), *FRANKA))[0]["lang"] == "second"
