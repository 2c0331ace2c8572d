"""Run the trainer, but SIGKILL it in the middle of its N-th file save (the file cut to half, then kill -9).

    python tests/helpers/kill_during_save.py N --config_yaml ... [overrides]

A real kill -9 at a chosen point inside a checkpoint save, which polling from outside cannot hit reliably.
"""

import os
import signal
import sys

import torch

from DiT4DiT.training import train

target = int(sys.argv.pop(1))
calls = 0
original_save = torch.save


def save_then_die(obj, f, *args, **kwargs):
    global calls
    calls += 1
    original_save(obj, f, *args, **kwargs)
    if calls == target:
        size = os.path.getsize(f)
        os.truncate(f, size // 2)
        os.kill(os.getpid(), signal.SIGKILL)


torch.save = save_then_die
sys.exit(train.main(sys.argv[1:]))
