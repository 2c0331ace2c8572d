"""The policy server on a tiny trained run: the original's protocol from a client written here, our client,
concurrent clients, bad requests, and a real server process stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import websockets
from websockets.sync.client import connect

from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.server import PolicyServer, running_server

ROOT = Path(__file__).resolve().parents[1]
IMAGE = (32, 96, 3)  # tiny config: 32-pixel views, RoboTwin's three side by side
STATE_DIM, CHUNK, ACTION_DIM = 14, 8, 14


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


def expected_actions(normalized: np.ndarray, action_stats: dict) -> np.ndarray:
    """The run's statistics applied by hand: min_max dims clipped and scaled into [min, max], binary dims 0/1."""
    low, high = np.asarray(action_stats["min"]), np.asarray(action_stats["max"])
    binary = np.asarray(action_stats["normalization"]) == "binary"
    scaled = (np.clip(normalized, -1, 1) + 1) / 2 * (high - low) + low
    return np.where(binary, (normalized > 0.5).astype(np.float64), scaled)


@pytest.fixture(scope="module")
def server(tiny_policy):
    with running_server(tiny_policy, max_message_bytes=1 << 20) as running:
        yield running


def test_a_client_written_from_the_protocol_gets_unnormalised_actions(server, tiny_run):
    with connect(f"ws://127.0.0.1:{server.port}", compression=None, max_size=None, proxy=None) as ws:
        metadata = raw_unpack(ws.recv())
        assert metadata["env"] == "simpler_env"
        ws.send(raw_pack({"type": "ping", "request_id": "p1"}))
        assert raw_unpack(ws.recv()) == {"status": "ok", "ok": True, "type": "ping", "request_id": "p1"}

        ws.send(raw_pack({"examples": [example(0), example(1)], "do_sample": False, "use_ddim": True,
                          "num_ddim_steps": 10, "request_id": "r7"}))
        reply = raw_unpack(ws.recv())
    assert {k: reply[k] for k in ("status", "ok", "type", "request_id")} == {
        "status": "ok", "ok": True, "type": "inference_result", "request_id": "r7"}
    normalized, actions = reply["data"]["normalized_actions"], reply["data"]["actions"]
    assert normalized.shape == (2, CHUNK, ACTION_DIM) and normalized.dtype == np.float32
    assert actions.shape == (2, CHUNK, ACTION_DIM) and actions.dtype == np.float32
    (stats,) = json.loads((tiny_run / "dataset_statistics.json").read_text()).values()
    np.testing.assert_allclose(actions, expected_actions(normalized, stats["action"]), rtol=1e-5, atol=1e-5)
    assert np.all(actions >= np.asarray(stats["action"]["min"]) - 1e-5)
    assert np.all(actions <= np.asarray(stats["action"]["max"]) + 1e-5)


def test_a_request_without_type_is_an_inference_as_in_the_original(server):
    with connect(f"ws://127.0.0.1:{server.port}", proxy=None) as ws:
        ws.recv()
        ws.send(raw_pack({"examples": [example()]}))
        reply = raw_unpack(ws.recv())
    assert reply["ok"] is True and reply["request_id"] == "default"
    assert reply["data"]["normalized_actions"].shape == (1, CHUNK, ACTION_DIM)


def test_our_client_against_our_server(server, tiny_run):
    with PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
        assert client.ping()
        meta = client.metadata
        assert (meta["image_size"], meta["action_chunk"], meta["state_dim"], meta["action_dim"]) == (32, CHUNK, 14, 14)
        (stats,) = json.loads((tiny_run / "dataset_statistics.json").read_text()).values()
        assert meta["statistics"]["action"] == stats["action"]
        data = client.infer([example(3)])
        assert data["actions"].shape == (1, CHUNK, ACTION_DIM)
        with pytest.raises(ServerError, match="lacks 'lang'"):
            client.infer([example(lang=None)])
        assert client.infer([example(4)])["actions"].shape == (1, CHUNK, ACTION_DIM)  # still serving


def test_concurrent_clients_each_get_their_own_answers(server):
    replies: dict[int, list] = {}
    errors = []

    def one_client(index: int):
        try:
            with PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
                got = []
                for round_ in range(3):
                    batch = [example(10 * index + round_ + j) for j in range(index + 1)]
                    reply = client.predict_action({"examples": batch, "request_id": f"c{index}-{round_}"})
                    got.append(reply)
                replies[index] = got
        except Exception as error:  # reported by the main thread's assertion below
            errors.append(error)

    threads = [threading.Thread(target=one_client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    assert sorted(replies) == [0, 1, 2, 3]
    for index, got in replies.items():
        assert [r["request_id"] for r in got] == [f"c{index}-{k}" for k in range(3)]
        for reply in got:
            assert reply["ok"] is True
            assert reply["data"]["normalized_actions"].shape == (index + 1, CHUNK, ACTION_DIM)
            assert reply["data"]["actions"].shape == (index + 1, CHUNK, ACTION_DIM)


BAD_REQUESTS = {
    "not msgpack": (b"\xc1\xc1 definitely not msgpack", "not msgpack"),
    "a text frame": ("hello", "text frame"),
    "not a map": (msgpack.packb([1, 2, 3]), "a request is a map"),
    "no examples": (raw_pack({"type": "infer"}), "needs 'examples'"),
    "missing image": (raw_pack({"examples": [example(image=None)]}), "lacks 'image'"),
    "missing instruction": (raw_pack({"examples": [example(lang=None)]}), "lacks 'lang'"),
    "image of the wrong shape": (raw_pack({"examples": [example(image=[np.zeros((64, 64, 3), np.uint8)])]}),
                                 r"shape \(64, 64, 3\)"),
    "image not an array": (raw_pack({"examples": [example(image=["pixels"])]}), "not a numpy array"),
    "state of the wrong shape": (raw_pack({"examples": [example(state=np.zeros((1, 9), np.float32))]}),
                                 r"state has shape \(1, 9\)"),
    "state with NaN": (raw_pack({"examples": [example(state=np.full((1, 14), np.nan, np.float32))]}), "NaN"),
    "too many examples": (raw_pack({"examples": [example(i) for i in range(9)]}), "at most 8"),
    "unknown type": (raw_pack({"type": "reset"}), "unsupported message type 'reset'"),
}


@pytest.mark.parametrize("name", sorted(BAD_REQUESTS))
def test_a_bad_request_gets_an_error_reply_and_the_connection_keeps_serving(server, name):
    frame, message = BAD_REQUESTS[name]
    with connect(f"ws://127.0.0.1:{server.port}", proxy=None) as ws:
        ws.recv()
        ws.send(frame)
        reply = raw_unpack(ws.recv())
        assert reply["status"] == "error" and reply["ok"] is False
        assert re.search(message, reply["error"]["message"]), reply
        ws.send(raw_pack({"examples": [example()], "request_id": "after"}))
        after = raw_unpack(ws.recv())
    assert after["ok"] is True and after["request_id"] == "after"


def test_an_oversized_frame_closes_that_connection_with_1009_and_the_server_keeps_serving(server):
    with connect(f"ws://127.0.0.1:{server.port}", proxy=None) as ws:
        ws.recv()
        ws.send(raw_pack({"examples": [example(image=[np.zeros((1024, 1024, 3), np.uint8)])]}))  # 3 MiB > 1 MiB
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            ws.recv()
    assert closed.value.rcvd.code == 1009
    with PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
        assert client.infer([example()])["actions"].shape == (1, CHUNK, ACTION_DIM)


def test_idle_timeout_stops_the_server(tiny_policy):
    server = PolicyServer(tiny_policy, "127.0.0.1", 0, idle_timeout=0.5)
    thread = threading.Thread(target=asyncio.run, args=(server.run(),), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()


def server_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "DiT4DiT.serving.server", *args], cwd=ROOT,
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


@pytest.mark.slow
def test_sigterm_stops_a_server_process_cleanly(tiny_ckpt):
    process = server_process("--ckpt", str(tiny_ckpt), "--host", "127.0.0.1", "--port", "0", "--device", "cpu")
    lines: list[str] = []
    try:
        port = wait_for_port(process, lines)
        client = PolicyClient("127.0.0.1", port, wait_s=10)
        assert client.infer([example()])["actions"].shape == (1, CHUNK, ACTION_DIM)
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = "".join(lines) + rest
    assert process.returncode == 0, log
    assert "stopped" in log
    assert re.search(r"request \S+ from .*: 1 example\(s\) in [\d.]+ ms \(model [\d.]+ ms", log)  # latency logged
    with pytest.raises(websockets.ConnectionClosed) as closed:
        client.ping()
    assert closed.value.rcvd.code == 1001  # going away


@pytest.mark.slow
def test_a_missing_checkpoint_or_unavailable_device_is_a_clear_start_up_error(tiny_ckpt, tmp_path):
    missing = server_process("--ckpt", str(tmp_path / "nope.pt"), "--port", "0", "--device", "cpu")
    _, err = missing.communicate(timeout=120)
    assert missing.returncode == 2 and f"{tmp_path / 'nope.pt'}: no such checkpoint file" in err

    npu = server_process("--ckpt", str(tiny_ckpt), "--port", "0", "--device", "npu")
    _, err = npu.communicate(timeout=120)
    assert npu.returncode == 2 and "--device npu: torch_npu is not importable" in err
