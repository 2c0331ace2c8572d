"""atomic_files: a file appears under its name only once complete; a folder is swapped in whole, the old one kept
until the new one is in place."""

from __future__ import annotations

import json

import pytest

from DiT4DiT.atomic_files import atomic_write, replace_folder, write_bytes_atomic, write_json_atomic


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "deep" / "state.json"
    write_json_atomic(target, {"step": 1})  # makes the folder too

    def half(tmp):
        tmp.write_text('{"step": ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half)
    assert json.loads(target.read_text()) == {"step": 1}
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]


def test_bytes_replace_what_was_there(tmp_path):
    target = tmp_path / "blob"
    write_bytes_atomic(target, b"old")
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"


def test_replace_folder_swaps_the_new_folder_in_and_removes_the_old(tmp_path):
    target, staging = tmp_path / "store", tmp_path / ".store.staging"
    staging.mkdir()
    (staging / "a").write_text("first")
    replace_folder(staging, target)  # nothing there yet: a rename
    staging.mkdir()
    (staging / "b").write_text("second")
    replace_folder(staging, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    assert [p.name for p in target.iterdir()] == ["b"]


def test_a_failed_swap_puts_the_old_folder_back(tmp_path):
    target = tmp_path / "store"
    target.mkdir()
    (target / "a").write_text("kept")
    with pytest.raises(FileNotFoundError):
        replace_folder(tmp_path / "missing-staging", target)
    assert (target / "a").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
