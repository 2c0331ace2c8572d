"""The server gathers concurrent requests into one forward: an example's actions are the same alone or batched
(its own seeded noise), each client gets exactly its own rows, requests that do not stack run apart, and a full
queue is an error reply."""

from __future__ import annotations

import logging
import re
import threading

import numpy as np
import pytest

from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.server import running_server
from helpers.fixtures_serving import example

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
