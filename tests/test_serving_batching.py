"""The server gathers concurrent requests into one forward: an example's actions are the same alone or batched
(its own seeded noise), each client gets exactly its own rows, requests that do not stack run apart, and a full
queue is an error reply."""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from websockets.sync.client import connect

from bench import mixed_traffic
from DiT4DiT.serving.batching import Batcher
from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.server import running_server
from helpers.faulty_server import failing_next_batch
from helpers.fixtures_serving import ROOT, example, raw_pack, raw_unpack, served

INSTRUCTIONS = ("place the bottle", "open the drawer and put the cup inside", "stack the blocks")


def seeded(index: int, **changes) -> dict:
    """Example `index` with its own noise seed (the protocol's per-example "seed")."""
    return {**example(index, lang=INSTRUCTIONS[index % len(INSTRUCTIONS)], **changes), "seed": 1000 + index}


def alone(policy, ex: dict) -> np.ndarray:
    return policy.infer(policy.check({"examples": [ex]}))["normalized_actions"][0]


def test_a_batched_forward_gives_each_example_the_actions_it_gets_alone(tiny_policy):
    examples = [seeded(i) for i in range(6)]
    batched = tiny_policy.infer(tiny_policy.check({"examples": examples}))["normalized_actions"]
    singles = np.stack([alone(tiny_policy, ex) for ex in examples])
    np.testing.assert_allclose(batched, singles, rtol=0, atol=1e-6)
    # The seed is what fixes the noise: another seed, other actions.
    assert np.abs(alone(tiny_policy, dict(examples[0], seed=7)) - singles[0]).max() > 1e-3


class RecordingInfer:
    """The policy's own infer, noting how many examples each forward took."""

    def __init__(self, policy):
        self.infer, self.sizes = policy.infer, []

    def __call__(self, examples):
        self.sizes.append(len(examples))
        return self.infer(examples)


def test_concurrent_clients_share_forwards_and_each_receives_its_own_actions(tiny_policy, monkeypatch):
    # Client k sends k + 1 examples a request (several examples in one request, too); client 5 sends no state,
    # so its requests cannot stack with the others' and run in forwards of their own.
    requests = {k: [seeded(10 * k + j, state=None if k == 5 else example(10 * k + j)["state"]) for j in range(k + 1)]
                for k in range(6)}
    expected = {k: np.stack([alone(tiny_policy, ex) for ex in exs]) for k, exs in requests.items()}
    recording = RecordingInfer(tiny_policy)
    monkeypatch.setattr(tiny_policy, "infer", recording)
    replies, errors, start = {}, [], threading.Barrier(len(requests))

    def one_client(k: int):
        try:
            with PolicyClient("127.0.0.1", server.port, wait_s=30) as client:
                start.wait(timeout=120)
                replies[k] = [client.predict_action({"examples": requests[k], "request_id": f"c{k}-{r}"})
                              for r in range(2)]
        except Exception as error:  # reported by the assertion below
            errors.append(error)

    # A long wait and room for every stackable example: the first forward gathers every client that arrives.
    with running_server(tiny_policy, max_forward_batch=15, max_wait_ms=3000) as server:
        threads = [threading.Thread(target=one_client, args=(k,)) for k in requests]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert not errors, errors
    for k, got in replies.items():
        assert [reply["request_id"] for reply in got] == [f"c{k}-0", f"c{k}-1"]
        for reply in got:
            assert reply["ok"] is True
            np.testing.assert_allclose(reply["data"]["normalized_actions"], expected[k], rtol=0, atol=1e-6)
            assert reply["data"]["actions"].shape[0] == k + 1
    assert sorted(replies) == list(requests)
    assert max(recording.sizes) > 6, recording.sizes  # requests of several clients went through one forward
    assert max(recording.sizes) <= 15
    assert sum(recording.sizes) == 2 * sum(len(exs) for exs in requests.values())


def test_a_full_queue_is_an_error_reply_and_the_waiting_request_is_still_answered(tiny_policy):
    first: dict = {}

    def first_request(port: int):
        with PolicyClient("127.0.0.1", port, wait_s=30) as client:
            first.update(client.predict_action({"examples": [seeded(0)]}))

    with running_server(tiny_policy, max_queue=1, max_forward_batch=8, max_wait_ms=4000) as server:
        with PolicyClient("127.0.0.1", server.port, wait_s=30) as client:
            # With this connection open, the first request waits up to 4 s for its request; meanwhile the queue
            # is full.
            waiting = threading.Thread(target=first_request, args=(server.port,))
            waiting.start()
            while not server._batcher._waiting and waiting.is_alive():
                threading.Event().wait(0.01)
            with pytest.raises(ServerError, match=r"the server is busy: 1 requests wait .*--max_queue 1.*retry later"):
                client.infer([seeded(1)])
        waiting.join(timeout=120)
    assert first["ok"] is True and first["data"]["actions"].shape[0] == 1


def test_a_lone_client_never_waits_for_others(tiny_policy, caplog):
    # One connection can have one request in flight: with a 60 s --max_wait_ms nothing more can join its forward.
    with caplog.at_level(logging.INFO, logger="dit4dit.serve"):
        with running_server(tiny_policy, max_wait_ms=60_000) as server:
            with PolicyClient("127.0.0.1", server.port, wait_s=30) as client:
                assert client.infer([seeded(0)])["actions"].shape[0] == 1
    (line,) = [r.message for r in caplog.records if "forward of" in r.message]
    waited = float(re.search(r"waited ([\d.]+) ms", line).group(1))
    assert waited < 30_000, line  # far below the 60 s the wait allows


# --- mixed robots, faults in the model thread, health (issue: a server that answers every client or exits) -------

def robot_example(client: int, request: int) -> dict:
    """A seeded example of one of two robots: three cameras side by side (32x96) or two (32x64)."""
    shape = (32, 96, 3) if client % 2 else (32, 64, 3)
    image = np.random.default_rng(100 * client + request).integers(0, 256, shape, dtype=np.uint8)
    return seeded(100 * client + request, image=[image])


def ask(ws, examples: list[dict], request_id: str, timeout: float = 120) -> dict:
    ws.send(raw_pack({"examples": examples, "request_id": request_id}))
    return raw_unpack(ws.recv(timeout=timeout))


def opened(port: int):
    ws = connect(f"ws://127.0.0.1:{port}", proxy=None, open_timeout=60)
    ws.recv(timeout=60)  # the metadata
    return ws


def test_eight_clients_of_two_robots_and_one_that_drops_mid_request_get_the_actions_they_get_alone(tiny_policy):
    # The first window of both frame sizes ended the model thread ("truth value of an array ... is ambiguous") and
    # every client then waited forever.
    requests = {c: [robot_example(c, r) for r in range(3)] for c in range(8)}
    expected = {c: [alone(tiny_policy, ex) for ex in exs] for c, exs in requests.items()}
    last = robot_example(11, 0)
    expected_last = alone(tiny_policy, last)
    replies, errors, start = {}, [], threading.Barrier(9)

    def one_client(c: int, port: int):
        try:
            with opened(port) as ws:
                start.wait(timeout=60)
                replies[c] = [ask(ws, [ex], f"c{c}-{r}") for r, ex in enumerate(requests[c])]
        except Exception as error:  # reported by the assertion below
            errors.append((c, error))

    def dropping_client(port: int):
        ws = opened(port)
        start.wait(timeout=60)
        ws.send(raw_pack({"examples": [robot_example(9, 0)], "request_id": "dropped"}))
        ws.close()  # gone before its answer

    with running_server(tiny_policy, max_forward_batch=8, max_wait_ms=50) as server:
        threads = [threading.Thread(target=one_client, args=(c, server.port)) for c in requests]
        threads.append(threading.Thread(target=dropping_client, args=(server.port,)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        with opened(server.port) as ws:
            after = ask(ws, [last], "after")
    assert not errors, errors
    for c, got in replies.items():
        for r, reply in enumerate(got):
            assert reply["ok"] is True and reply["request_id"] == f"c{c}-{r}", reply
            np.testing.assert_allclose(reply["data"]["normalized_actions"][0], expected[c][r], rtol=0, atol=1e-5)
    assert sorted(replies) == list(requests)
    assert after["ok"] is True
    np.testing.assert_allclose(after["data"]["normalized_actions"][0], expected_last, rtol=0, atol=1e-5)


def test_a_fault_outside_a_forward_answers_the_request_it_held_and_the_thread_keeps_serving(tiny_policy, monkeypatch):
    monkeypatch.setattr(Batcher, "_next_batch", failing_next_batch(1))
    with running_server(tiny_policy) as server:
        with opened(server.port) as ws:
            failed = ask(ws, [seeded(0)], "first", timeout=60)
            served = ask(ws, [seeded(1)], "second", timeout=60)
    assert failed["ok"] is False and failed["request_id"] == "first"
    assert "RuntimeError: injected fault while taking a batch" in failed["error"]["message"], failed
    assert served["ok"] is True
    np.testing.assert_allclose(served["data"]["normalized_actions"][0], alone(tiny_policy, seeded(1)), rtol=0,
                               atol=1e-5)
    assert server.failure is None


@pytest.mark.slow
def test_a_model_thread_that_cannot_go_on_answers_every_waiting_client_and_the_process_exits_1(tiny_ckpt):
    # _next_batch fails at every call: each failure answers one request, the third ends the thread, and the server
    # answers the rest, stops accepting and exits 1 (before: the daemon thread died silently, the process stayed up
    # and every client waited forever).
    helper = [str(ROOT / "tests" / "helpers" / "faulty_server.py")]
    with served(tiny_ckpt, "--max_wait_ms", "2000", "--max_forward_batch", "8", entry=helper) as (process, port,
                                                                                                   lines):
        connections = [opened(port) for _ in range(5)]  # all open first: the oldest request waits for the others
        for k, ws in enumerate(connections):
            ws.send(raw_pack({"examples": [seeded(k)], "request_id": f"w{k}"}))
        replies = [raw_unpack(ws.recv(timeout=60)) for ws in connections]
        _, rest = process.communicate(timeout=60)
    log = "".join(lines) + rest
    assert process.returncode == 1, log
    assert all(reply["ok"] is False for reply in replies), replies
    assert sorted(reply["request_id"] for reply in replies) == [f"w{k}" for k in range(5)]
    messages = [reply["error"]["message"] for reply in replies]
    assert all("RuntimeError: injected fault while taking a batch" in message for message in messages), messages
    assert sum("the server failed while handling the request" in message for message in messages) == 3, messages
    assert sum("the model thread stopped" in message for message in messages) == 2, messages
    (error,) = [line for line in log.splitlines() if line.startswith("error:")]
    assert "the model thread stopped (RuntimeError: injected fault while taking a batch)" in error
    assert "Exiting 1 so that a supervisor restarts the server" in error


def health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


class StuckInfer:
    """The policy's infer, stuck (a hung device, a deadlock) until released."""

    def __init__(self, policy):
        self.infer, self.entered, self.release = policy.infer, threading.Event(), threading.Event()

    def __call__(self, examples):
        self.entered.set()
        self.release.wait(timeout=120)
        return self.infer(examples)


def test_healthz_is_200_while_the_model_answers_and_503_while_it_is_stuck(tiny_policy, monkeypatch):
    stuck = StuckInfer(tiny_policy)
    monkeypatch.setattr(tiny_policy, "infer", stuck)
    with running_server(tiny_policy, request_timeout_s=1, token="s3cret") as server:
        assert health(server.port) == (200, "ok\n")  # no token needed
        with connect(f"ws://127.0.0.1:{server.port}", proxy=None,
                     additional_headers={"Authorization": "Api-Key s3cret"}) as ws:
            ws.recv()
            ws.send(raw_pack({"examples": [seeded(0)], "request_id": "stuck"}))
            assert stuck.entered.wait(timeout=60)
            timed_out = raw_unpack(ws.recv(timeout=60))  # answered after 1 s, the forward still stuck
            status, reason = health(server.port)
            stuck.release.set()
            deadline = time.monotonic() + 60
            while health(server.port)[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            recovered = health(server.port)
    assert timed_out["ok"] is False and "no answer within 1 s (--request_timeout_s)" in timed_out["error"]["message"]
    assert status == 503 and "the model has not answered for" in reason and "--request_timeout_s 1" in reason, reason
    assert recovered == (200, "ok\n")


MIXED_TRAFFIC_SEED = 41


def test_randomized_mixed_traffic_well_formed_requests_get_their_actions_alone_bad_ones_one_error(tiny_policy):
    # bench/mixed_traffic.py's generator at a fixed seed: 12 clients x 6 requests of every kind (frames of 1 to 3
    # cameras, cameras one by one, float and uint8 pixels, with and without state, 1 to 3 examples; malformed, NaN,
    # dropped mid-request); bench/bench_mixed_traffic.py runs bigger ones.
    with running_server(tiny_policy, max_wait_ms=20) as server:
        planned = mixed_traffic.plan(MIXED_TRAFFIC_SEED, 12, 6, mixed_traffic.metadata(server.port))
        replies = mixed_traffic.send(server.port, planned, timeout_s=120)
        outcome = mixed_traffic.check(server.port, planned, replies, timeout_s=120)
        health = server._batcher.health()
    assert not outcome.problems, outcome.problems
    assert set(outcome.counts) == set(mixed_traffic.KINDS) and sum(outcome.counts.values()) == 72, outcome.counts
    assert len(outcome.shapes) >= 8, outcome.shapes  # many shapes of well-formed request
    assert outcome.largest_difference <= mixed_traffic.ATOL and health is None
