"""dataloader/layout.py: which folders are LeRobot datasets (meta/info.json), one or two levels below a root."""

from __future__ import annotations

from DiT4DiT.dataloader.layout import DATASET_MARK, dataset_folders, is_dataset


def mark(folder):
    (folder / DATASET_MARK).parent.mkdir(parents=True)
    (folder / DATASET_MARK).write_text("{}")
    return folder


def test_a_dataset_is_a_folder_with_meta_info_json(tmp_path):
    assert not is_dataset(tmp_path)
    (tmp_path / "meta").mkdir()
    (tmp_path / DATASET_MARK).mkdir()  # a folder of that name is not the file
    assert not is_dataset(tmp_path)
    assert is_dataset(mark(tmp_path / "set"))


def test_datasets_are_found_one_or_two_levels_down_in_order(tmp_path):
    found = [mark(tmp_path / "task_b"), mark(tmp_path / "group" / "task_a"), mark(tmp_path / "task_a")]
    mark(tmp_path / "x" / "y" / "too_deep")
    assert dataset_folders(tmp_path) == sorted(found)
    assert dataset_folders(tmp_path / "missing") == []
