"""The policy server on a tiny trained run: the original's protocol from a client written from the protocol alone
(tests/helpers), our client, concurrent clients, bad requests, start-up errors (main() in-process), and a real
server process stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading

import msgpack
import numpy as np
import pytest
import websockets
from websockets.sync.client import connect

from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.server import PolicyServer, running_server
from helpers.fixtures_serving import IMAGE, example, raw_pack, raw_unpack, served
from helpers.in_process import call_main

CHUNK, ACTION_DIM = 8, 14


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


def tagged(**fields) -> dict:
    return {k.encode(): v for k, v in fields.items()}


COMPLEX = tagged(__npgeneric__=True, data=1, dtype="<c16")
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
    # Hostile tagged maps where the protocol puts numpy values; None: answered (the map was only an id or valid).
    "array larger than its bytes": (raw_pack({"examples": [
        {"image": [tagged(__ndarray__=True, data=b"\0" * 8, dtype="|u1", shape=[32, 96, 3])], "lang": "go"}]}),
        "does not describe a value"),
    "object dtype array": (msgpack.packb({"examples": [tagged(__ndarray__=True, data=b"\0" * 8, dtype="|O", shape=[1])]}),
                           "does not describe a value"),
    "dtype that is no dtype": (msgpack.packb({"examples": [tagged(__ndarray__=True, data=b"", dtype="<zz", shape=[0])]}),
                               "does not describe a value"),
    "type as an array": (raw_pack({"type": np.zeros(3, np.float32), "examples": [example()]}), "'type' must be text"),
    "type as a complex scalar": (msgpack.packb({"type": COMPLEX}), "dtype complex128 is refused"),
    "big-endian image": (raw_pack({"examples": [example(image=[np.zeros(IMAGE, ">f4")])]}), None),
    "request id as a complex scalar": (msgpack.packb({"type": "ping", "request_id": COMPLEX}),
                                       "dtype complex128 is refused"),
    "request id as an array": (raw_pack({"examples": [example()], "request_id": np.arange(4)}), None),
    "lang as bytes": (raw_pack({"examples": [example(lang=b"\xff\xfe")]}), "lang must be a non-empty"),
    "300 views": (raw_pack({"examples": [example(image=[np.zeros((32, 32 * 300, 3), np.uint8)])]}), "with 1 to 3 views"),
    "30 frames": (raw_pack({"examples": [example(image=[np.zeros(IMAGE, np.uint8)] * 30)]}), "at most 5"),
    "huge instruction": (raw_pack({"examples": [example(lang="pick " * 200_000)]}), "lang is 1000000 characters"),
    # Non-finite pixels were answered ok: true with NaN actions.
    "image with NaN": (raw_pack({"examples": [example(image=[np.full(IMAGE, np.nan, np.float32)])]}),
                       r"image\[0\] holds NaN or infinite values"),
    "image with infinity": (raw_pack({"examples": [example(image=[np.full(IMAGE, np.inf, np.float64)])]}),
                            r"image\[0\] holds NaN or infinite values"),
    # Accepted before: 1e30 pixels, and 1.0001 read as a 0-255 image (a black frame).
    "float image of 1e30": (raw_pack({"examples": [example(image=[np.full(IMAGE, 1e30, np.float32)])]}),
                            r"image\[0\] holds float pixels from 1e\+30 to 1e\+30; float pixels lie in 0..1"),
    "float image of -1e30": (raw_pack({"examples": [example(image=[np.full(IMAGE, -1e30, np.float32)])]}),
                             r"from -1e\+30 to -1e\+30; float pixels lie in 0..1"),
    "float image just above 1": (raw_pack({"examples": [example(image=[np.full(IMAGE, 1.0001, np.float64)])]}),
                                 r"from 1.0001 to 1.0001; float pixels lie in 0..1 \(send 0-255 images as uint8\)"),
    "float image in 0..1": (raw_pack({"examples": [example(image=[np.full(IMAGE, 0.5, np.float32)])]}), None),
    "seed as text": (raw_pack({"examples": [{**example(), "seed": "7"}]}), "seed is '7'; a seed is an integer"),
    "negative seed": (raw_pack({"examples": [{**example(), "seed": -1}]}), "seed is -1; a seed is an integer"),
    "seed beyond 64 bits": (raw_pack({"examples": [{**example(), "seed": 2**64 - 1}]}), "seed is 18446744073709551615"),
    "seed as a numpy integer": (raw_pack({"examples": [{**example(), "seed": tagged(__npgeneric__=True, data=3,
                                                                                    dtype="<i8")}]}), None),
}


@pytest.mark.parametrize("name", sorted(BAD_REQUESTS))
def test_a_bad_request_gets_a_reply_never_a_closed_connection_and_the_connection_keeps_serving(server, name):
    frame, message = BAD_REQUESTS[name]
    with connect(f"ws://127.0.0.1:{server.port}", proxy=None) as ws:
        ws.recv()
        ws.send(frame)
        reply = raw_unpack(ws.recv())
        if message is None:
            assert reply["ok"] is True, reply
        else:
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


@pytest.mark.slow
def test_sigterm_stops_a_server_process_cleanly(tiny_ckpt):
    with served(tiny_ckpt) as (process, port, lines):
        client = PolicyClient("127.0.0.1", port, wait_s=10)
        assert client.infer([example()])["actions"].shape == (1, CHUNK, ACTION_DIM)
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    log = "".join(lines) + rest
    assert process.returncode == 0, log
    assert "stopped" in log
    assert re.search(r"request \S+ from .*: 1 example\(s\) in [\d.]+ ms \(model [\d.]+ ms", log)  # latency logged
    with pytest.raises(websockets.ConnectionClosed) as closed:
        client.ping()
    assert closed.value.rcvd.code == 1001  # going away


def test_a_missing_checkpoint_or_unavailable_device_is_a_clear_start_up_error(tiny_ckpt, tmp_path):
    from DiT4DiT.serving.server import main

    missing = call_main(main, ["--ckpt", str(tmp_path / "nope.pt"), "--port", "0", "--device", "cpu"], dict(os.environ))
    assert missing.returncode == 2 and f"{tmp_path / 'nope.pt'}: no such checkpoint file" in missing.stderr

    npu = call_main(main, ["--ckpt", str(tiny_ckpt), "--port", "0", "--device", "npu"], dict(os.environ))
    assert npu.returncode == 2 and "--device npu: torch_npu is not installed" in npu.stderr


def test_a_profiling_server_says_where_each_request_spent_its_time(tiny_ckpt):
    import torch

    from DiT4DiT.serving.policy import Policy
    from DiT4DiT.serving.stage_timing import STAGES

    policy = Policy.load(tiny_ckpt, torch.device("cpu"), max_batch=2, profile=True, sampling_steps=3)
    with running_server(policy) as running, PolicyClient("127.0.0.1", running.port) as client:
        reply = client.predict_action({"examples": [example(0), example(1)], "request_id": "t"})
        plain = client.infer([example(0)])
    timing = reply["timing"]
    assert set(timing) == {f"{stage}_ms" for stage in STAGES} | {"total_ms", "sampling_steps", "forward_examples"}
    assert timing["sampling_steps"] == 3 and timing["forward_examples"] == 2
    assert all(timing[f"{stage}_ms"] >= 0 for stage in STAGES)
    assert sum(timing[f"{stage}_ms"] for stage in STAGES) <= timing["total_ms"] * 1.05 + 1
    assert set(reply["data"]) == set(plain) == {"normalized_actions", "actions"}  # timing travels beside the data


def test_bad_sampling_steps_are_refused_before_anything_loads(tiny_ckpt):
    from DiT4DiT.serving.server import main

    zero = call_main(main, ["--ckpt", str(tiny_ckpt), "--port", "0", "--device", "cpu", "--sampling_steps", "0"],
                     dict(os.environ))
    assert zero.returncode == 2 and "--sampling_steps 0: must be 1 to 1000" in zero.stderr
