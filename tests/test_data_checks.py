"""Bad data is caught while the dataset is built (before step 1): NaN/Inf, empty episodes, broken or short videos."""

import json
import logging
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from DiT4DiT.dataloader import DataError, save_dataset_statistics
from helpers.fixtures_data import build_read_only

TASK1 = "robotwin_task1"  # the mixture of exactly adjust_bottle
EPISODE1 = "data/chunk-000/episode_000001.parquet"


def _build(task_dir, data_cfg, *overrides):
    """Build from the folder made read-only; its content snapshot (hashes) must not change (chmod binds no root)."""
    return build_read_only(task_dir, data_cfg(task_dir.parent, TASK1, *overrides))


def _set_value(path, column, row, dim, value):
    table = pq.read_table(path)
    values = np.stack(table.column(column).to_pylist()).astype(np.float32)
    values[row, dim] = value
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, pa.array(list(values), type=pa.list_(pa.float32()))), path)


@pytest.mark.parametrize("value, shown", [(np.nan, "nan"), (np.inf, "inf")])
def test_a_non_finite_action_names_file_column_and_row(writable_task, data_cfg, value, shown):
    _set_value(writable_task / EPISODE1, "action", 5, 3, value)
    with pytest.raises(DataError, match=rf"episode_000001\.parquet: episode 1, column 'action', row 5 \(dim 3\) is "
                                        rf"{shown}; 1 non-finite value\(s\).*skip_non_finite_episodes true"):
        _build(writable_task, data_cfg)


def test_a_non_finite_state_is_found_too(writable_task, data_cfg):
    _set_value(writable_task / EPISODE1, "observation.state", 0, 13, -np.inf)
    with pytest.raises(DataError, match=r"column 'observation\.state', row 0 \(dim 13\) is -inf"):
        _build(writable_task, data_cfg)


def test_skipping_non_finite_episodes_counts_them_and_keeps_statistics_finite(writable_task, data_cfg, caplog,
                                                                               tmp_path):
    _set_value(writable_task / EPISODE1, "action", 2, 0, np.nan)
    with caplog.at_level(logging.WARNING):
        ds = _build(writable_task, data_cfg, "datasets.vla_data.skip_non_finite_episodes=true",
                    "datasets.vla_data.holdout_episodes=0")
    assert "skipped 1 episode(s) with NaN/Inf values" in caplog.text
    assert ds.parts[0].episodes.tolist() == [0, 2]
    save_dataset_statistics(ds.statistics(), tmp_path / "stats.json")
    (saved,) = json.loads((tmp_path / "stats.json").read_text()).values()
    assert np.isfinite(saved["action"]["std"]).all() and saved["num_trajectories"] == 2


def test_statistics_with_a_nan_are_never_written(tmp_path):
    with pytest.raises(DataError, match=r"stats\.json: not written, statistic robotwin\.action\.mean\[1\] is nan"):
        save_dataset_statistics({"robotwin": {"action": {"mean": [0.0, float("nan")]}}}, tmp_path / "stats.json")
    assert not (tmp_path / "stats.json").exists()


def test_a_zero_length_episode(writable_task, data_cfg):
    path = writable_task / EPISODE1
    pq.write_table(pq.read_table(path).slice(0, 0), path)
    episodes = writable_task / "meta/episodes.jsonl"
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    rows[1]["length"] = 0
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"episode_000001\.parquet: episode 1 has no rows \(zero-length episode\)"):
        _build(writable_task, data_cfg)


def test_a_corrupt_video_of_a_training_episode_stops_before_step_one(writable_task, data_cfg):
    video = writable_task / "videos/chunk-000/observation.images.cam_left_wrist/episode_000001.mp4"
    video.write_bytes(video.read_bytes()[:200])  # cut off: the header opens, nothing decodes
    with pytest.raises(DataError, match=r"cam_left_wrist/episode_000001\.mp4: video of episode 1 (cannot be decoded|"
                                        r"holds no decodable frame)"):
        _build(writable_task, data_cfg)


def test_a_video_shorter_than_its_episode(writable_task, data_cfg):
    lengths = [json.loads(line)["length"] for line in (writable_task / "meta/episodes.jsonl").read_text().splitlines()]
    short, long = int(np.argmin(lengths)), int(np.argmax(lengths))
    folder = writable_task / "videos/chunk-000/observation.images.cam_high"
    shutil.copyfile(folder / f"episode_{short:06d}.mp4", folder / f"episode_{long:06d}.mp4")
    with pytest.raises(DataError, match=rf"episode_{long:06d}\.mp4: {lengths[short]} frames for an episode of "
                                        rf"{lengths[long]} rows"):
        _build(writable_task, data_cfg, "datasets.vla_data.holdout_episodes=0")


def test_a_resolution_other_than_info_json_is_a_warning_naming_the_file(writable_task, data_cfg, caplog):
    info_path = writable_task / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.cam_high"]["shape"] = [96, 128, 3]
    info_path.write_text(json.dumps(info))
    with caplog.at_level(logging.WARNING):
        _build(writable_task, data_cfg)
    assert "3 video(s) differ from meta/info.json's size, e.g. " in caplog.text
    assert "cam_high/episode_000000.mp4: 48x64 frames, but features.observation.images.cam_high" \
           ".shape says 96x128" in caplog.text
    assert caplog.text.count("differ from meta/info.json's size") == 1  # once per dataset, not per file
