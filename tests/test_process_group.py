"""training/process_group.py: the end of a training process group, in this process on a one-rank gloo group."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from DiT4DiT.training.process_group import destroy_process_group


def test_without_a_group_there_is_nothing_to_end():
    assert not dist.is_initialized()
    destroy_process_group(everyone_here=True)
    assert not dist.is_initialized()


@pytest.mark.parametrize("everyone_here", [True, False])
def test_the_group_is_gone_afterwards(tmp_path, everyone_here):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    destroy_process_group(everyone_here)
    assert not dist.is_initialized()
