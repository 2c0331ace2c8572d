"""The data order depends only on (seed, epoch), shards are disjoint, and a resume point skips exactly."""

import pytest

from DiT4DiT.training.sampler import ResumableBatchOrder, iterate_batches


class Numbers:
    """A dataset of plain integers that records which epoch it was told about."""

    def __init__(self, n):
        self.n, self.epoch = n, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (self.epoch, i)

    def set_epoch(self, epoch):
        self.epoch = epoch


def test_order_depends_only_on_seed_and_epoch():
    a = ResumableBatchOrder(50, 4, 0, 1, seed=1)
    b = ResumableBatchOrder(50, 4, 0, 1, seed=1)
    assert a.epoch_batches(3) == b.epoch_batches(3)
    assert a.epoch_batches(0) != a.epoch_batches(1)
    assert a.epoch_batches(0) != ResumableBatchOrder(50, 4, 0, 1, seed=2).epoch_batches(0)


def test_ranks_get_disjoint_equal_shards_without_a_ragged_tail():
    shards = [ResumableBatchOrder(50, 4, rank, 2, seed=0).epoch_batches(0) for rank in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 50 // 8
    seen = [i for shard in shards for batch in shard for i in batch]
    assert len(seen) == len(set(seen)) == 48


def test_resuming_mid_epoch_continues_the_same_stream():
    dataset = Numbers(30)
    sampler = ResumableBatchOrder(30, 4, 0, 1, seed=5)
    straight = iterate_batches(dataset, sampler, 0, 0, list)
    expected = [next(straight) for _ in range(20)]  # crosses two epoch boundaries (7 batches per epoch)
    resumed = iterate_batches(Numbers(30), sampler, 9, 0, list)
    assert [next(resumed) for _ in range(11)] == expected[9:]
    assert expected[7][0][0] == 1  # the dataset heard about epoch 1 before its batches were drawn


def test_too_small_a_dataset_says_what_to_change():
    with pytest.raises(ValueError, match="fewer than one global batch"):
        ResumableBatchOrder(3, 2, 0, 2, seed=0)
