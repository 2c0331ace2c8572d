"""dataloader/cache.py: where the data cache and the stores live, and a cached file that cannot be read is rebuilt."""

from __future__ import annotations

from pathlib import Path

from DiT4DiT.dataloader.cache import CACHE_ENV, cache_root, read_cached, store_root


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


def test_an_unreadable_cache_file_reads_as_absent(tmp_path, caplog):
    path = tmp_path / "stats.json"
    assert read_cached(path) is None
    path.write_text('{"mean": [1')
    assert read_cached(path) is None and "rebuilding it" in caplog.text
    path.write_text('{"mean": [1]}')
    assert read_cached(path) == {"mean": [1]}
