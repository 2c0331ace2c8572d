"""Damaged datasets, one table row each: (case id, how the dataset is damaged, error class, words of its one line).

Each is found while the dataset is built (before step 1), as a one-line error naming the file and the fix, and
the damaged folder is left as it was. Adding a case is one row.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from DiT4DiT.dataloader import DataError
from helpers.fixtures_data import dataset_of, snapshot

EPISODE = "data/chunk-000/episode_000001.parquet"


def _edit_json(name, change):
    def damage(folder):
        path = folder / "meta" / name
        content = json.loads(path.read_text())
        path.write_text(json.dumps(change(content)))
    return damage


def _set(name, key, value):
    def change(content):
        content[key] = value
        return content
    return _edit_json(name, change)


def _slice(key, **entry):
    def change(modality):
        modality["state"][key].update(entry)
        return modality
    return _edit_json("modality.json", change)


def _column(name, values):
    """Replace one column of episode 1's parquet file with values computed from the old column."""
    def damage(folder):
        path = folder / EPISODE
        table = pq.read_table(path)
        old = table.column(name).to_pylist()
        table = table.set_column(table.schema.get_field_index(name), name, values(old))
        pq.write_table(table, path)
    return damage


def _nan_at(row):
    def values(old):
        old[row] = float("nan")
        return pa.array(old, type=pa.float32())
    return values


def _huge_action(old):
    old[5] = [1e38] + old[5][1:]
    return pa.array(old, type=pa.list_(pa.float32()))


CASES = [
    ("info_is_a_list", _edit_json("info.json", lambda info: [info]), DataError,
     ("info.json", "holds a list, not an object", "regenerate")),
    ("chunks_size_zero", _set("info.json", "chunks_size", 0), DataError,
     ("info.json", "'chunks_size' is 0", "positive integer")),
    ("chunks_size_string", _set("info.json", "chunks_size", "1000"), DataError,
     ("'chunks_size' is '1000'", "positive integer")),
    ("fps_zero", _set("info.json", "fps", 0), DataError, ("info.json", "'fps' is 0", "positive number")),
    ("fps_string", _set("info.json", "fps", "15"), DataError, ("'fps' is '15'", "positive number")),
    ("data_path_missing", _edit_json("info.json", lambda info: {k: v for k, v in info.items() if k != "data_path"}),
     DataError, ("key 'data_path' is missing",)),
    ("feature_shape_string", _edit_json("info.json", lambda info: {**info, "features": {
        **info["features"], "action": {**info["features"]["action"], "shape": ["14"]}}}), DataError,
     ("features.action.shape is ['14']", "positive integers")),
    ("modality_is_a_list", _edit_json("modality.json", lambda modality: [modality]), DataError,
     ("modality.json", "holds a list", "python -m DiT4DiT.tools.modality")),
    ("modality_slice_as_string", _slice("left_joints", start="0"), DataError,
     ("modality.json", "'state.left_joints' has start='0'", "must be integers")),
    ("modality_slice_reversed", _slice("left_joints", start=6, end=0), DataError,
     ("'state.left_joints' reads [6:0]", "reversed range")),
    ("modality_slice_empty", _slice("left_gripper", start=6, end=6), DataError, ("[6:6]", "empty or reversed")),
    ("timestamp_nan", _column("timestamp", _nan_at(3)), DataError,
     (EPISODE, "episode 1, column 'timestamp', row 3 is nan", "frame_index / fps")),
    ("action_of_strings", _column("action", lambda old: pa.array([str(v) for v in old])), DataError,
     (EPISODE, "episode 1, column 'action' holds", "not numbers", "numeric dtype")),
    ("task_index_as_string", _column("task_index", lambda old: pa.array([str(v) for v in old])), DataError,
     (EPISODE, "column 'task_index' holds", "not integer task indices")),
    ("action_overflows_normalisation", _column("action", _huge_action), DataError,
     (EPISODE, "column 'action', row 5 (dim 0) is 1e+38", "overflow when normalised")),
]


@pytest.mark.parametrize("case, damage, error, words", CASES, ids=[c[0] for c in CASES])
def test_a_damaged_dataset_is_one_line_naming_the_fix(case, damage, error, words, writable_task, data_cfg):
    damage(writable_task)
    before = snapshot(writable_task)
    with pytest.raises(error) as raised:
        dataset_of(data_cfg(writable_task.parent, "robotwin_task1"))
    message = str(raised.value)
    assert "\n" not in message
    missing = [w for w in words if w not in message]
    assert not missing, f"{missing} not in: {message}"
    assert raised.value.exit_code == error.exit_code
    assert snapshot(writable_task) == before  # nothing written into the dataset

