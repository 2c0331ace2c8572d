"""dataloader/index.py: one scan of a dataset folder gives its steps, widths, statistics and tasks, cached by content;
a modality.json range outside its column is named."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.index import check_widths, load_index
from DiT4DiT.dataloader.reader import DatasetLayout, Slice, read_episode_columns

NUMERIC = ["observation.state", "action"]


@pytest.fixture(scope="module")
def layout(tiny_robotwin_root):
    return DatasetLayout(tiny_robotwin_root / "adjust_bottle")


def test_the_scan_counts_every_step_and_the_cache_gives_it_back(layout, tmp_path, caplog):
    caplog.set_level(logging.INFO, "DiT4DiT.dataloader.index")
    index = load_index(layout, NUMERIC, "task_index", tmp_path)
    assert "scanning" in caplog.text
    assert index.lengths == layout.episodes and index.num_transitions == sum(layout.episodes.values())
    assert index.widths == {"observation.state": 14, "action": 14}
    assert index.episode_tasks == {episode: [0] for episode in layout.episodes} and index.skipped == {}
    actions = np.concatenate([read_episode_columns(layout, e, ["action"])["action"] for e in sorted(layout.episodes)])
    np.testing.assert_allclose(index.statistics["action"]["mean"], actions.mean(axis=0), rtol=1e-5, atol=1e-6)
    caplog.clear()
    assert load_index(layout, NUMERIC, "task_index", tmp_path) == index
    assert "scanning" not in caplog.text  # read from the cache


def test_a_range_wider_than_its_column_is_named(layout, tmp_path):
    index = load_index(layout, NUMERIC, "task_index", tmp_path)
    check_widths(layout, index, {"state.left_gripper": Slice("observation.state", 6, 7, True)})
    with pytest.raises(DataError, match=r"'state.torso' reads \[10:20\] of column 'observation.state', which is only "
                                        r"14 wide; fix start/end in modality.json"):
        check_widths(layout, index, {"state.torso": Slice("observation.state", 10, 20, True)})
