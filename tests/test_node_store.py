"""model/modules/node_store.py: what identifies a snapshot's parts for a store, and the tensors' digest a stored
file is checked against."""

from __future__ import annotations

import torch

from DiT4DiT.model.modules.node_store import snapshot_identity, tensor_sha256


def test_the_identity_follows_the_named_parts_only(tiny_pipeline_dir, tmp_path):
    import shutil

    copy = tmp_path / "snapshot"
    shutil.copytree(tiny_pipeline_dir, copy)
    parts = ("text_encoder", "tokenizer")
    assert snapshot_identity(copy, parts) == snapshot_identity(tiny_pipeline_dir, parts)  # where it lies is no part
    (copy / "vae" / "config.json").write_text("{}")  # a part the store does not depend on
    assert snapshot_identity(copy, parts) == snapshot_identity(tiny_pipeline_dir, parts)
    config = copy / "text_encoder" / "config.json"
    config.write_text(config.read_text().replace("}", ', "extra": 1}', 1))
    assert snapshot_identity(copy, parts) != snapshot_identity(tiny_pipeline_dir, parts)


def test_the_digest_covers_every_byte_in_order():
    a, b = torch.arange(4, dtype=torch.float32), torch.ones(2, dtype=torch.bfloat16)
    assert tensor_sha256([a, b]) == tensor_sha256([a.clone(), b.clone()])
    assert tensor_sha256([a, b]) != tensor_sha256([b, a])
    assert tensor_sha256([a.view(2, 2).t()]) == tensor_sha256([a.view(2, 2).t().contiguous()])
