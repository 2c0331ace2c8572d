"""Run under `accelerate launch` in place of train.py: the trainer, with the work one rank does alone made slow.

    slow_one_rank_work.py SECONDS TRAIN_ARGS...

Each node's local main process takes SECONDS more to index the datasets, global rank 0 to encode its share of the
prompt store and to write each weights file (a checkpoint's, the final model): on slow shared storage these outlast
a collective's timeout while every other rank waits.
"""

from __future__ import annotations

import functools
import os
import sys
import time


def slowed(function, leader_variable: str):
    @functools.wraps(function)
    def slow(*args, **kwargs):
        if os.environ.get(leader_variable, "0") == "0":
            time.sleep(SECONDS)
        return function(*args, **kwargs)
    return slow


SECONDS = float(sys.argv[1])

if __name__ == "__main__":
    from DiT4DiT.model.modules import prompt_store
    from DiT4DiT.training import checkpoint, trainer
    from DiT4DiT.training.train import main

    trainer.build_vla_datasets = slowed(trainer.build_vla_datasets, "LOCAL_RANK")
    # The store's first write of a rank's share (node_store.NodeStore.fill_missing): once per share, rank 0's always first.
    prompt_store.PromptStore._ensure_writable = slowed(prompt_store.PromptStore._ensure_writable, "RANK")
    checkpoint.save_weights = slowed(checkpoint.save_weights, "RANK")
    sys.exit(main(sys.argv[2:]))
