"""A policy server that is safe by default: loopback unless asked, an optional shared token, bounded requests, and
an error reply (never a 1011 close) for every request it cannot answer."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import websockets
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from DiT4DiT.serving import wire
from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.server import build_parser, running_server
from helpers.fixtures_serving import example, raw_pack, raw_unpack, served
from helpers.in_process import call_main


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


# --- the server started on hostile run folders: one line naming the file, exit 2, never a traceback ------------

def _config(text: str):
    return lambda run, ckpt: (run / "config.yaml").write_text(text)


def _config_edit(old: str, new: str):
    def edit(run, ckpt):
        path = run / "config.yaml"
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
    return edit


def _billion_laughs(run, ckpt):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (run / "config.yaml").write_text("\n".join(lines) + "\n" + (run / "config.yaml").read_text())


def _checkpoint_bytes(cut):
    return lambda run, ckpt: ckpt.write_bytes(cut(ckpt.read_bytes()))


def _checkpoint_object(obj):
    return lambda run, ckpt: torch.save(obj, ckpt)


def _checkpoint_linked_to_a_text_file(run, ckpt):
    # A stand-in for /etc/passwd made by the test: never a system file.
    passwd = run.parent / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    ckpt.unlink()
    ckpt.symlink_to(passwd)


def _nan_weight(run, ckpt):
    state = torch.load(ckpt, weights_only=True)
    name = next(n for n, t in state.items() if t.is_floating_point() and t.numel() > 1)
    state[name][0] = float("nan")
    torch.save(state, ckpt)


def _statistics(text: str):
    return lambda run, ckpt: (run / "dataset_statistics.json").write_text(text)


HOSTILE_RUN_FOLDERS = {  # name: (damage(run_dir, checkpoint), words of the one error line)
    "config with a python tag": (_config('run_id: !!python/object/apply:os.system ["touch {marker}"]\n'),
                                 ("config.yaml, line 1: a YAML tag", "no tags, anchors or aliases")),
    "config with a local tag": (_config_edit("run_id:", "run_id: !secret"), ("a YAML tag",)),
    "config of nested anchors (billion laughs)": (_billion_laughs, ("config.yaml, line 1: a YAML anchor",)),
    "config a list": (_config("- framework\n- datasets\n"), ("holds a list, not a mapping of config sections",)),
    "config empty": (_config(""), ("config.yaml: holds nothing, not a mapping",)),
    "config not UTF-8": (lambda run, ckpt: (run / "config.yaml").write_bytes(b"run_id: \xff\xfe\n"), ("not UTF-8 text",)),
    "config of 2 MiB": (_config("# padding\n" * 200_000), ("bytes; a run's config.yaml is a few KiB",)),
    "config that does not parse": (_config("run_id: [\n"), ("not valid YAML",)),
    "max_sequence_length 1e8": (_config_edit("max_sequence_length: 64", "max_sequence_length: 1e8"),
                                ("framework.cosmos25.max_sequence_length=1e8 is out of range 1..4096",)),
    "empty checkpoint": (_checkpoint_bytes(lambda data: b""), ("not a checkpoint torch can read",)),
    "truncated checkpoint": (_checkpoint_bytes(lambda data: data[: len(data) // 2]), ("not a checkpoint torch can read",)),
    "checkpoint of a list": (_checkpoint_object([1, 2, 3]), ("holds a list, not a state dict of tensors",)),
    "checkpoint of other objects": (_checkpoint_object({"weight": [1.0, 2.0]}), ("holds a dict, not a state dict",)),
    "checkpoint linked to a passwd file": (_checkpoint_linked_to_a_text_file, ("not a checkpoint torch can read",)),
    "weights with NaN": (_nan_weight, ("holds NaN or infinite values", "serve an earlier checkpoint")),
    "statistics nested 100,000 deep": (_statistics("[" * 100_000 + "]" * 100_000), ("not readable JSON",)),
    "statistics a list": (_statistics("[1, 2]"), ("expected a map of statistics tags",)),
    "statistics not JSON": (_statistics("{'franka': nan"), ("not readable JSON",)),
}


@pytest.fixture
def run_copy(tiny_ckpt, tmp_path):
    """A copy of the tiny run folder (config.yaml, statistics, the checkpoint): (run_dir, checkpoint)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "dataset_statistics.json"):
        shutil.copy(tiny_ckpt.parents[1] / name, run / name)
    checkpoint = run / "checkpoints" / tiny_ckpt.name
    shutil.copy(tiny_ckpt, checkpoint)
    return run, checkpoint


@pytest.mark.parametrize("name", sorted(HOSTILE_RUN_FOLDERS))
def test_the_server_on_a_hostile_run_folder_exits_with_one_line_naming_the_file(name, run_copy, tmp_path):
    from DiT4DiT.serving.server import main

    damage, words = HOSTILE_RUN_FOLDERS[name]
    run, checkpoint = run_copy
    marker = tmp_path / "marker"
    config = run / "config.yaml"
    damage(run, checkpoint)
    if config.is_file() and config.stat().st_size < 1 << 20:
        config.write_bytes(config.read_bytes().replace(b"{marker}", str(marker).encode()))
    result = call_main(main, ["--ckpt", str(checkpoint), "--port", "0", "--device", "cpu"], dict(os.environ))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr[-2000:]
    missing = [word for word in words if word not in lines[0]]
    assert not missing, f"{missing} not in: {lines[0]}"
    assert str(run) in lines[0]
    assert not marker.exists()


def test_a_header_with_non_ascii_bytes_is_refused_with_401_not_a_500(tiny_policy):
    with running_server(tiny_policy, token="s3cret") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                        b"Authorization: Api-Key s\xc3\xa9cret\xff\r\n\r\n")
            status = raw.recv(4096).split(b"\r\n")[0]
        assert status.startswith(b"HTTP/1.1 401"), status
        assert ask(server.port, raw_pack({"type": "ping"}), {"Authorization": "Api-Key s3cret"})["ok"] is True


def test_a_token_that_is_not_printable_ascii_is_refused_at_start_and_help_says_prefer_the_variable(tmp_path):
    from DiT4DiT.serving.server import main

    env = {k: v for k, v in os.environ.items() if k != wire.TOKEN_ENV}
    result = call_main(main, ["--ckpt", str(tmp_path / "x.pt"), "--token", "sécret"], env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "holds characters other than printable ASCII" in result.stderr
    help_text = " ".join(build_parser().format_help().split())
    assert "/proc/PID/cmdline" in help_text and f"Prefer setting ${wire.TOKEN_ENV}" in help_text


def test_refused_connections_are_logged_at_most_once_an_interval_with_their_count(tiny_policy, caplog):
    with caplog.at_level(logging.WARNING, logger="dit4dit.serve"):
        with running_server(tiny_policy, token="s3cret") as server:
            for _ in range(40):
                with pytest.raises(InvalidStatus):
                    connect(f"ws://127.0.0.1:{server.port}", proxy=None)
    counts = [int(re.match(r"(\d+) connection\(s\) refused", r.message).group(1))
              for r in caplog.records if "connection(s) refused" in r.message]
    assert sum(counts) == 40  # every refusal counted; the rest of the interval's are said when the server stops
    assert len(counts) < 10, counts  # one line per 10 s, not one per refusal (1,223 lines in the probe)


@pytest.mark.slow
def test_sigterm_stops_the_server_at_once_and_answers_the_request_still_waiting(tiny_ckpt):
    # The request waits up to 10 s for others to join its forward; SIGTERM must not wait for it.
    with served(tiny_ckpt, "--max_wait_ms", "10000", "--max_forward_batch", "8") as (process, port, lines):
        outcome: list = []

        def waiting_client():
            try:
                with PolicyClient("127.0.0.1", port, wait_s=30) as client:
                    outcome.append(client.predict_action({"examples": [example()], "request_id": "w"}))
            except websockets.ConnectionClosed as closed:
                outcome.append(closed)

        thread = threading.Thread(target=waiting_client)
        thread.start()
        while not any("connection from" in line and "opened" in line for line in lines):
            lines.append(process.stderr.readline())
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
        thread.join(timeout=60)
    assert process.returncode == 0, "".join(lines) + rest
    assert "stopped" in rest
    (answer,) = outcome
    if isinstance(answer, dict):  # answered before the connection closed
        # waiting when the signal came ("stopped before answering"), or arriving just after it ("is stopping"): the
        # connection's "opened" line comes before its request, so a loaded machine can order them either way
        message = answer["error"]["message"]
        assert answer["ok"] is False and ("stopped before answering" in message or "is stopping" in message), message


@pytest.mark.slow
def test_sigterm_during_a_forward_exits_cleanly(tiny_ckpt):
    # The model thread is a daemon: a forward still running when the interpreter finalised was torn down inside
    # torch's C++ frames and the process aborted ("terminate called without an active exception", -6) after its
    # clean stop. Two clients keep the model busy, so the signal lands while a forward runs.
    with served(tiny_ckpt) as (process, port, lines):
        answered = [threading.Event() for _ in range(2)]

        def busy_client(done: threading.Event):
            try:
                with PolicyClient("127.0.0.1", port, wait_s=30) as client:
                    while True:
                        client.predict_action({"examples": [example()] * 32})
                        done.set()
            except (websockets.ConnectionClosed, ServerError, OSError):
                done.set()

        threads = [threading.Thread(target=busy_client, args=(done,), daemon=True) for done in answered]
        for thread in threads:
            thread.start()
        assert all(done.wait(timeout=120) for done in answered)
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
        for thread in threads:
            thread.join(timeout=60)
    assert process.returncode == 0, "".join(lines) + rest
    assert "stopped" in rest and "terminate called" not in rest


@pytest.mark.slow
def test_sigterm_ends_the_server_after_a_window_of_two_frame_sizes(tiny_ckpt):
    # Two robots' frames in one window ended the model thread holding a batch it had taken from the queue; SIGTERM
    # then waited forever for those requests' connections (nothing would ever answer them).
    with served(tiny_ckpt, "--max_wait_ms", "3000", "--max_forward_batch", "8") as (process, port, lines):
        connections = []
        for k, width in enumerate((96, 64, 96, 64)):
            ws = connect(f"ws://127.0.0.1:{port}", proxy=None, open_timeout=60)
            ws.recv(timeout=60)
            connections.append(ws)
        for k, ws in enumerate(connections):
            image = np.zeros((32, (96, 64)[k % 2], 3), np.uint8)
            ws.send(raw_pack({"examples": [example(k, image=[image])], "request_id": f"r{k}"}))
        answered = []
        for ws in connections:
            try:
                answered.append(raw_unpack(ws.recv(timeout=120))["ok"])
            except TimeoutError:
                answered.append(None)
        process.send_signal(signal.SIGTERM)
        try:
            _, rest = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            rest = "(still running 60 s after SIGTERM)"
    assert process.returncode == 0, "".join(lines) + rest
    assert answered == [True] * 4, answered


@pytest.mark.parametrize("option, value, message", [
    ("--max_message_mb", "-1", "--max_message_mb -1: must be 0.1 to 65536 MiB"),
    ("--max_message_mb", "0", "--max_message_mb 0: must be 0.1 to 65536 MiB"),  # 0 meant the default before
    ("--max_message_mb", "1e-9", "--max_message_mb 1e-09: must be 0.1 to 65536 MiB"),
    ("--max_message_mb", "nan", "--max_message_mb nan: must be 0.1 to 65536 MiB"),
    ("--idle_timeout", "nan", "--idle_timeout nan: must be -1 (never) or more than 0 and at most 2.592e+06 seconds"),
    ("--idle_timeout", "0", "--idle_timeout 0: must be -1 (never)"),
    ("--request_timeout_s", "inf", "--request_timeout_s inf: must be more than 0 and at most 86400"),
    ("--request_timeout_s", "-5", "--request_timeout_s -5: must be more than 0"),
    ("--owner_pid", "0", "--owner_pid 0: no such process"),
])
def test_an_option_outside_its_range_is_one_line_naming_it_and_the_range(tiny_ckpt, option, value, message):
    from DiT4DiT.serving.server import main

    result = call_main(main, ["--ckpt", str(tiny_ckpt), "--port", "0", "--device", "cpu", option, value],
                       dict(os.environ))
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode == 2 and line.startswith(f"error: {message}"), result.stderr


@pytest.mark.slow
def test_a_server_started_for_one_run_exits_when_its_owner_ends(tiny_ckpt):
    # What the closed-loop side process starts: before, a server whose starter was killed served (and held its
    # memory: 7-9 GiB at full size) until someone killed it.
    owner = subprocess.Popen(["sleep", "600"])
    try:
        with served(tiny_ckpt, "--owner_pid", str(owner.pid)) as (process, port, lines):
            with PolicyClient("127.0.0.1", port, wait_s=30) as client:
                assert client.ping()
            owner.kill()
            owner.wait()
            _, rest = process.communicate(timeout=60)
    finally:
        owner.kill()
    assert process.returncode == 0, "".join(lines) + rest
    assert f"the process that started this server (--owner_pid {owner.pid}) has ended: stopping" in rest


def test_a_base_model_whose_config_does_not_match_its_weights_is_one_line(tiny_ckpt, tiny_pipeline_dir, tmp_path):
    # num_layers: 100000 built 100,000 blocks before any weight loaded: past 4 GB, then a bad_alloc traceback.
    from DiT4DiT.serving.server import main

    hostile = tmp_path / "Cosmos-hostile"
    shutil.copytree(tiny_pipeline_dir, hostile)
    config = hostile / "transformer" / "config.json"
    config.write_text(config.read_text().replace('"num_layers": 4', '"num_layers": 100000'))
    result = call_main(main, ["--ckpt", str(tiny_ckpt), "--base_model", str(hostile), "--port", "0", "--device", "cpu"],
                       dict(os.environ))
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"{config}: num_layers says 100000, but its weights hold 4 transformer blocks" in line
