"""config/paths.py: a path the user gave, resolved; a symbolic-link loop is a ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.paths import resolved


def test_a_relative_path_through_a_link_resolves(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    assert resolved(Path("link"), "datasets.vla_data.data_root_dir") == (tmp_path / "real").resolve()


def test_a_link_loop_names_the_key_and_the_fix(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(ConfigError, match=r"^datasets.vla_data.data_root_dir: .*/a/x cannot be resolved .*symbolic "
                                          r"link loop on the way\? Fix or remove the link"):
        resolved(tmp_path / "a" / "x", "datasets.vla_data.data_root_dir")
