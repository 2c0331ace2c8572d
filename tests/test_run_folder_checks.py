"""serving/run_folder_checks.py: a served run folder's config.yaml is a small plain mapping, or one line naming the
file and what it holds instead, before any YAML object is built."""

from __future__ import annotations

import pytest

from DiT4DiT.serving.run_folder_checks import MAX_CONFIG_BYTES, RunFolderFileError, read_run_config_file


def config(tmp_path, content):
    path = tmp_path / "config.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def test_a_recorded_config_reads_as_a_plain_mapping(tmp_path):
    assert read_run_config_file(config(tmp_path, "trainer:\n  max_train_steps: 20\nseed: 42\n")) == {
        "trainer": {"max_train_steps": 20}, "seed": 42}


@pytest.mark.parametrize("content, message", [
    ("a: &x [1]\nb: *x\n", "line 1: a YAML anchor; a run's config.yaml holds plain values only"),
    ("a: !!python/object:os.system {}\n", "line 1: a YAML tag"),
    (b"seed: \xff\n", "not UTF-8 text"),
    ("- 1\n- 2\n", "holds a list, not a mapping of config sections"),
    ("", "holds nothing, not a mapping"),
    ("a: [1\n", "not valid YAML"),
])
def test_what_a_run_never_writes_is_refused_with_the_file_named(tmp_path, content, message):
    path = config(tmp_path, content)
    with pytest.raises(RunFolderFileError, match=message) as refused:
        read_run_config_file(path)
    assert str(refused.value).startswith(str(path)) and str(refused.value).endswith("restore the run's own config.yaml")


def test_a_config_over_the_cap_is_refused_before_it_is_read(tmp_path):
    path = config(tmp_path, "a: 1\n" + "#" * MAX_CONFIG_BYTES)
    with pytest.raises(RunFolderFileError, match=f"bytes; a run's config.yaml is a few KiB \\(at most {MAX_CONFIG_BYTES}"):
        read_run_config_file(path)
