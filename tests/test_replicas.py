"""The end-of-run replica comparison's parts, in-process: host digests and the lines naming differing tensors.
The whole path (two ranks that end apart, the final model kept) is in test_train_e2e.py."""

from __future__ import annotations

import torch

from DiT4DiT.training.replicas import differences, replica_digest, tensor_digest, trainable_digests


def test_digests_see_every_bit_and_nothing_else():
    weights = torch.randn(64, 3, dtype=torch.bfloat16)
    assert tensor_digest(weights) == tensor_digest(weights.clone())
    nudged = weights.clone()
    nudged.view(torch.int16)[5, 1] ^= 1  # the last bit of one element
    assert tensor_digest(nudged) != tensor_digest(weights)
    assert tensor_digest(weights.reshape(3, 64)) != tensor_digest(weights)  # same bytes, other shape
    assert tensor_digest(weights.t()) == tensor_digest(weights.t().contiguous())  # layout does not matter


def test_only_trainable_tensors_count_and_differences_name_ranks_and_tensors():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[1].bias.requires_grad_(False)
    same = trainable_digests(model)
    assert list(same) == ["0.weight", "0.bias", "1.weight"]
    with torch.no_grad():
        model[0].bias[0] += 1
    apart = trainable_digests(model)
    assert differences([same, same, same]) == []
    assert differences([same, same, apart]) == ["rank 2 differs from rank 0 in 1 of 3 tensor(s): 0.bias"]
    assert replica_digest(same) != replica_digest(apart)
    many = [{f"t{i}": "a" for i in range(8)}, {f"t{i}": "b" for i in range(8)}]
    assert differences(many) == ["rank 1 differs from rank 0 in 8 of 8 tensor(s): t0, t1, t2, t3, t4 and 3 more"]
