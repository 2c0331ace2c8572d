"""Serving fixtures: the checkpoint of the session's tiny run (fixtures_training) and its policy, loaded once, a
client written from the protocol alone (raw_pack, raw_unpack, example) and a server process started and awaited."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import msgpack
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
IMAGE = (32, 96, 3)  # tiny config: 32-pixel views, RoboTwin's three side by side
STATE_DIM = 14


# --- a client written only from the protocol (UPSTREAM_SPEC §8.2), not from our code --------------------------

def raw_pack(obj) -> bytes:
    def tag(value):
        if isinstance(value, np.ndarray):
            return {b"__ndarray__": True, b"data": value.tobytes(), b"dtype": value.dtype.str, b"shape": list(value.shape)}
        raise TypeError(type(value))

    return msgpack.packb(obj, default=tag)


def raw_unpack(data: bytes):
    def untag(obj):
        if b"__ndarray__" in obj:
            return np.frombuffer(obj[b"data"], dtype=np.dtype(obj[b"dtype"])).reshape(obj[b"shape"])
        return obj

    return msgpack.unpackb(data, object_hook=untag)


def example(seed: int = 0, **changes) -> dict:
    rng = np.random.default_rng(seed)
    ex = {"image": [rng.integers(0, 256, IMAGE, dtype=np.uint8)], "lang": "place the bottle",
          "state": rng.uniform(-1, 1, (1, STATE_DIM)).astype(np.float32)}
    ex.update(changes)
    return {k: v for k, v in ex.items() if v is not None}


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_run) -> Path:
    return tiny_run / "checkpoints" / "steps_20_pytorch_model.pt"


@pytest.fixture(scope="session")
def tiny_policy(tiny_ckpt):
    from DiT4DiT.serving.policy import Policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models run fastest on one thread on the shared 2-core machine
    yield Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=8)
    torch.set_num_threads(threads)


SERVER = ["-m", "DiT4DiT.serving.server"]


def server_process(*args: str, env: dict | None = None, entry: list[str] = SERVER) -> subprocess.Popen:
    """`entry`: what python runs (the server module, or a script that runs it with a fault injected)."""
    return subprocess.Popen([sys.executable, *entry, *args], cwd=ROOT,
                            env=env or dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
                            stderr=subprocess.PIPE, text=True)


def wait_for_port(process: subprocess.Popen, lines: list[str], deadline_s: float = 300) -> int:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            raise AssertionError(f"the server exited before listening:\n{''.join(lines)}")
        lines.append(line)
        found = re.search(r"serving DiT4DiT on ws://127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    raise AssertionError("the server did not start listening in time")


@contextlib.contextmanager
def served(ckpt: Path, *args: str, entry: list[str] = SERVER) -> Iterator[tuple[subprocess.Popen, int, list[str]]]:
    """A server process on `ckpt` (CPU, loopback, a free port), awaited until it listens: (process, port, the
    stderr lines read so far). Killed at the end if the test left it running."""
    process = server_process("--ckpt", str(ckpt), "--host", "127.0.0.1", "--port", "0", "--device", "cpu", *args,
                             entry=entry)
    lines: list[str] = []
    try:
        yield process, wait_for_port(process, lines), lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
