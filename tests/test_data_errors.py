"""Bad input gets a DataError / ConfigError naming the file, key or value and the fix; nothing is written."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.dataloader import DataError
from helpers.fixtures_data import build_read_only, dataset_of

TASK1 = "robotwin_task1"  # the mixture of exactly adjust_bottle


def _build_read_only(task_dir, data_cfg, *overrides):
    """Build from the broken folder made read-only, and check nothing in it changed."""
    return build_read_only(task_dir, data_cfg(task_dir.parent, TASK1, *overrides))


def _rewrite_parquet(path, **columns):
    table = pq.read_table(path)
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, values)
    pq.write_table(table, path)


@pytest.mark.parametrize("name", ["episodes.jsonl", "tasks.jsonl"])
def test_missing_meta_file(writable_task, data_cfg, name):
    (writable_task / "meta" / name).unlink()
    with pytest.raises(DataError, match=rf"adjust_bottle.*missing meta/{name}.*LeRobot v2"):
        _build_read_only(writable_task, data_cfg)


def test_missing_info_json_is_not_a_dataset(writable_task, data_cfg):
    (writable_task / "meta" / "info.json").unlink()
    with pytest.raises(DataError, match=r"adjust_bottle: no meta/info\.json, so this is not a LeRobot dataset folder"):
        _build_read_only(writable_task, data_cfg)


def test_modality_without_a_needed_key(writable_task, data_cfg):
    path = writable_task / "meta" / "modality.json"
    modality = json.loads(path.read_text())
    del modality["state"]["left_gripper"]
    path.write_text(json.dumps(modality))
    with pytest.raises(DataError, match=r"modality\.json.*'robotwin' needs 'state\.left_gripper'.*add it"):
        _build_read_only(writable_task, data_cfg)


def test_missing_video(writable_task, data_cfg):
    (writable_task / "videos/chunk-000/observation.images.cam_left_wrist/episode_000001.mp4").unlink()
    with pytest.raises(DataError, match=r"video file\(s\) missing.*cam_left_wrist/episode_000001\.mp4"):
        _build_read_only(writable_task, data_cfg)


def test_corrupt_video(writable_task, data_cfg):
    video = writable_task / "videos/chunk-000/observation.images.cam_high/episode_000000.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    # Found while building the dataset (every video is probed), not when the episode is first sampled.
    with pytest.raises(DataError, match=r"cam_high/episode_000000\.mp4: video of episode 0 cannot be decoded"):
        _build_read_only(writable_task, data_cfg, "datasets.vla_data.holdout_episodes=0")


def test_timestamp_without_a_frame(writable_task, data_cfg):
    path = writable_task / "data/chunk-000/episode_000000.parquet"
    shifted = pq.read_table(path).column("timestamp").to_numpy() + np.float32(5.0)
    _rewrite_parquet(path, timestamp=pa.array(shifted, type=pa.float32()))
    ds = _build_read_only(writable_task, data_cfg, "datasets.vla_data.holdout_episodes=0")
    index = next(i for i in range(len(ds)) if ds.parts[0].locate(ds.choose(i)[1])[0] == 0)
    with pytest.raises(DataError, match=r"episode_000000\.mp4: episode 0 has no frame within .* of timestamp "
                                        r"\d+\.\d+s \(nearest frame at"):
        ds[index]


def test_state_narrower_than_modality(writable_task, data_cfg):
    path = writable_task / "data/chunk-000/episode_000002.parquet"
    state = np.stack(pq.read_table(path).column("observation.state").to_pylist())[:, :12]
    _rewrite_parquet(path, **{"observation.state": pa.array(list(state), type=pa.list_(pa.float32()))})
    with pytest.raises(DataError, match=r"'observation\.state' is 12 wide in episode 2 but 14 wide"):
        _build_read_only(writable_task, data_cfg)


def test_info_and_modality_disagree_with_the_parquet_width(writable_task, data_cfg):
    modality_path = writable_task / "meta" / "modality.json"
    modality = json.loads(modality_path.read_text())
    modality["action"]["right_gripper"] = {"start": 13, "end": 15}
    modality_path.write_text(json.dumps(modality))
    with pytest.raises(DataError, match=r"'action\.right_gripper' reads \[13:15\] of column 'action', "
                                        r"which is only 14 wide"):
        _build_read_only(writable_task, data_cfg)


def test_info_shape_disagrees_with_the_parquet(writable_task, data_cfg):
    info_path = writable_task / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["action"]["shape"] = [16]
    info_path.write_text(json.dumps(info))
    with pytest.raises(DataError, match=r"'action' is 14 wide in the parquet files but meta/info\.json"):
        _build_read_only(writable_task, data_cfg)


def test_unknown_data_mix_lists_valid_names_closest_first(tiny_robotwin_root, data_cfg):
    with pytest.raises(ConfigError, match=r"data_mix='robotwn' is neither a known mixture nor an existing path; valid names: robotwin, "):
        dataset_of(data_cfg(tiny_robotwin_root, "robotwn"))


def test_empty_mixture_names_the_root_and_expected_folders(tmp_path, data_cfg):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"data_mix=robotwin_task2: none of its 2 datasets is under "
                                        r"datasets\.vla_data\.data_root_dir=.*empty \(expected folders such as "
                                        r"place_a2b_left, place_a2b_right\)"):
        dataset_of(data_cfg(tmp_path / "empty", "robotwin_task2"))


def test_unset_data_root_and_unknown_backend(tiny_robotwin_root, data_cfg):
    from DiT4DiT.training.input_checks import validate_training_config

    with pytest.raises(ConfigError, match=r"data_root_dir is not set \(data_mix=robotwin_task1 names folders under it\)"):
        validate_training_config(data_cfg("null", TASK1, "framework.cosmos25.base_model=/"))
    with pytest.raises(DataError, match=r"datasets\.vla_data\.data_root_dir is not set"):
        dataset_of(data_cfg("null", TASK1))
    with pytest.raises(ConfigError, match=r"video_backend: 'ffmpeg' is not one of pyav, torchcodec"):
        dataset_of(data_cfg(tiny_robotwin_root, TASK1, "datasets.vla_data.video_backend=ffmpeg"))


def test_holdout_leaving_no_training_episode(tiny_robotwin_root, data_cfg):
    with pytest.raises(DataError, match=r"holdout_episodes=3 leaves no training episode"):
        dataset_of(data_cfg(tiny_robotwin_root, TASK1, "datasets.vla_data.holdout_episodes=3"))
