"""dataloader/cache.py: a cached file that cannot be read is rebuilt (where the cache lives: test_config_paths)."""

from __future__ import annotations

from DiT4DiT.dataloader.cache import read_cached


def test_an_unreadable_cache_file_reads_as_absent(tmp_path, caplog):
    path = tmp_path / "stats.json"
    assert read_cached(path) is None
    path.write_text('{"mean": [1')
    assert read_cached(path) is None and "rebuilding it" in caplog.text
    path.write_text('{"mean": [1]}')
    assert read_cached(path) == {"mean": [1]}
