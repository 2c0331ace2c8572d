"""dataloader/reader.py: one LeRobot dataset folder's meta files, the paths they imply and an episode's columns,
on the tiny RoboTwin data (LeRobot v2.1)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.reader import DatasetLayout, EpisodeCache, Slice, read_episode_columns


@pytest.fixture(scope="module")
def layout(tiny_robotwin_root):
    return DatasetLayout(tiny_robotwin_root / "adjust_bottle")


def test_the_meta_files_give_episodes_tasks_and_paths(layout):
    lengths = [json.loads(line)["length"] for line in (layout.root / "meta" / "episodes.jsonl").read_text().splitlines()]
    assert layout.version == "v2" and layout.name == "adjust_bottle"
    assert layout.episodes == dict(enumerate(lengths))
    assert list(layout.tasks.values()) == ["Pick up the bottle on the table and set it upright."]
    assert layout.parquet_path(1).relative_to(layout.root).as_posix() == "data/chunk-000/episode_000001.parquet"
    assert [p.name for p in layout.meta_files()] == ["info.json", "episodes.jsonl", "tasks.jsonl", "modality.json"]


def test_modality_keys_map_to_columns_and_ranges(layout):
    assert layout.slice_of("state.left_gripper", "robotwin") == Slice("observation.state", 6, 7, True)
    assert layout.slice_of("state.left_gripper", "robotwin").width == 1
    assert layout.video_key_of("video.cam_high", "robotwin") == "observation.images.cam_high"
    with pytest.raises(DataError, match=r"data config 'robotwin' needs 'state.torso', which is not there"):
        layout.slice_of("state.torso", "robotwin")


def test_an_episode_reads_its_list_columns_as_rows_by_width(layout):
    columns = read_episode_columns(layout, 0, ["observation.state", "action"])
    assert columns["observation.state"].shape == (layout.episodes[0], 14)
    cache = EpisodeCache(layout, ["action"], capacity=1)
    np.testing.assert_array_equal(cache.get(0)["action"], columns["action"])
    assert cache.get(0) is cache.get(0)


def test_a_missing_column_or_parquet_file_is_named(layout, tmp_path):
    with pytest.raises(DataError, match=r"episode 0 lacks column\(s\) \['no_such'\]"):
        read_episode_columns(layout, 0, ["no_such"])
    copy = tmp_path / "set"
    shutil.copytree(layout.root / "meta", copy / "meta")
    with pytest.raises(DataError, match="episode 0 has no parquet file"):
        read_episode_columns(DatasetLayout(copy), 0, ["action"])


def test_a_folder_without_meta_is_not_a_dataset(tmp_path):
    with pytest.raises(DataError, match="no meta/info.json, so this is not a LeRobot dataset folder"):
        DatasetLayout(tmp_path)
