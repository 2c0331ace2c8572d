"""training/shared_run_dir.py: the nodes of a torchrun world, and a one-node run skips the shared-folder check."""

from __future__ import annotations

from DiT4DiT.training.shared_run_dir import check_shared_run_dir, nodes_in_world


def test_nodes_follow_world_and_local_world(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert nodes_in_world() == (1, 1)
    monkeypatch.setenv("WORLD_SIZE", "32")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert nodes_in_world() == (2, 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert nodes_in_world() == (1, 32)


def test_one_node_writes_no_marker(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    check_shared_run_dir(None, tmp_path / "runs")  # no process group, one node: nothing to check
    assert not (tmp_path / "runs").exists()
