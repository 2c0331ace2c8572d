"""config/paths.py: a path the user gave, resolved; a symbolic-link loop is a ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.paths import CACHE_ENV, cache_root, resolved, store_root


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


def test_the_config_wins_then_the_environment_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_root(str(tmp_path / "configured")) == tmp_path / "configured"
    assert cache_root(None) == tmp_path / "env"
    monkeypatch.delenv(CACHE_ENV)
    assert cache_root(None) == Path.home() / ".cache" / "dit4dit"


def test_a_store_goes_to_its_own_folder_or_beside_the_cache(tmp_path):
    assert store_root("prompt", str(tmp_path / "mine"), None) == tmp_path / "mine"
    assert store_root("prompt", None, str(tmp_path)) == tmp_path / "prompt_embeddings"
    assert store_root("latent", None, str(tmp_path)) == tmp_path / "vae_latents"
