"""A policy server that is safe by default: loopback unless asked, an optional shared token, bounded requests, and
an error reply (never a 1011 close) for every request it cannot answer."""

from __future__ import annotations

import logging
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import websockets
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from DiT4DiT.serving import wire
from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.server import build_parser, running_server
from helpers.fixtures_serving import example, raw_pack, raw_unpack, served


def ask(port: int, frame, headers=None) -> dict:
    with connect(f"ws://127.0.0.1:{port}", proxy=None, max_size=None, additional_headers=headers) as ws:
        ws.recv()
        ws.send(frame)
        return raw_unpack(ws.recv())


def test_the_server_listens_on_loopback_unless_told_and_warns_naming_the_address(tiny_policy, caplog):
    assert build_parser().parse_args(["--ckpt", "x.pt"]).host == "127.0.0.1"
    with caplog.at_level(logging.WARNING, logger="dit4dit.serve"):
        with running_server(tiny_policy) as local:
            assert local.host == "127.0.0.1"
        assert not [r for r in caplog.records if "listening on" in r.message]
        with running_server(tiny_policy, host="0.0.0.0"):
            pass
    (warning,) = [r.message for r in caplog.records if "listening on" in r.message]
    assert warning.startswith("listening on 0.0.0.0") and "--token" in warning


def test_with_a_token_only_clients_that_send_it_connect(tiny_policy, monkeypatch):
    monkeypatch.delenv(wire.TOKEN_ENV, raising=False)
    with running_server(tiny_policy, token="s3cret") as server:
        for headers in (None, {"Authorization": "Api-Key wrong"}):
            with pytest.raises(InvalidStatus) as refused:
                connect(f"ws://127.0.0.1:{server.port}", proxy=None, additional_headers=headers)
            assert refused.value.response.status_code == 401
        # The original's client sends its api_key as this header.
        reply = ask(server.port, raw_pack({"type": "ping", "request_id": 1}), {"Authorization": "Api-Key s3cret"})
        assert reply["ok"] is True
        with pytest.raises(ServerError, match=f"requires a token.*{wire.TOKEN_ENV}"):
            PolicyClient("127.0.0.1", server.port, wait_s=5)
        with PolicyClient("127.0.0.1", server.port, token="s3cret", wait_s=5) as client:
            assert client.ping()
        monkeypatch.setenv(wire.TOKEN_ENV, "s3cret")
        with PolicyClient("127.0.0.1", server.port, wait_s=5) as client:
            assert client.infer([example()])["actions"].shape[0] == 1


# Requests the bounds refuse before any work: a 1,000,000-character instruction, a 300-view image.
HUGE_INSTRUCTION = (raw_pack({"examples": [example(lang="pick " * 200_000)]}), "lang is 1000000 characters")
THREE_HUNDRED_VIEWS = (raw_pack({"examples": [example(image=[np.zeros((32, 32 * 300, 3), np.uint8)])]}),
                       "with 1 to 3 views")


def test_the_message_limit_follows_the_models_bounds(tiny_policy):
    shape = tiny_policy.shape
    assert (shape.max_views, shape.max_frames, shape.max_instruction_chars) == (3, 5, 4 * 64)
    with running_server(tiny_policy) as server:
        assert server.max_message_bytes == shape.max_message_bytes() < 16 << 20
        with PolicyClient("127.0.0.1", server.port, wait_s=5) as client:
            assert client.metadata["limits"]["max_views"] == 3
            # The largest well-formed request passes.
            full = [example(i, image=[np.zeros((32, 96, 3), np.float32)] * 5, lang="x" * 256)
                    for i in range(shape.max_batch)]
            assert client.infer(full)["actions"].shape[0] == shape.max_batch


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


@pytest.mark.slow
def test_huge_instruction_and_300_views_leave_the_server_process_rss_within_budget(tiny_ckpt):
    with served(tiny_ckpt, "--max_batch", "8") as (process, port, _):
        with PolicyClient("127.0.0.1", port, wait_s=10) as client:
            client.infer([example()])  # the first answer allocates the model's working memory
            before = rss_mib(process.pid)
            for _ in range(5):
                for frame, refusal in (HUGE_INSTRUCTION, THREE_HUNDRED_VIEWS):
                    reply = ask(port, frame)
                    assert reply["ok"] is False and re.search(refusal, reply["error"]["message"])
            with connect(f"ws://127.0.0.1:{port}", proxy=None, max_size=None) as ws:
                ws.recv()
                ws.send(raw_pack({"examples": [example(lang="x" * (64 << 20))]}))  # beyond the frame limit
                with pytest.raises(websockets.ConnectionClosedError) as closed:
                    ws.recv()
            assert closed.value.rcvd.code == 1009
            assert client.infer([example()])["actions"].shape[0] == 1
            after = rss_mib(process.pid)
        # Each refused request held at most its frame (about 1 MiB here); the original's server grew 13 GB.
        assert after - before < 64, (before, after)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
