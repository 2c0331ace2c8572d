"""Mixed traffic against one policy server, from a seeded generator: what a lab's robots bring to one server.

`plan(seed, clients, requests, metadata)` draws each client's requests: frames of 1 to `max_views` cameras side by
side or cameras sent one by one (`views`, of random sizes, resized by the server), with and without state, one to
three examples, each example with its own noise seed; some malformed (no instruction, a frame of the wrong height,
examples of two shapes, bytes that are not msgpack, a negative seed), some with NaN (state or float pixels), and
some sent by a client that then drops its connection without reading the answer (it reconnects for the rest).
`send(port, planned)` runs every client at once, each on its own connection with one request in flight;
`check(port, planned, replies)` then replays every well-formed request alone, on one connection, and compares:
every well-formed request's actions must equal what it gets alone (within `ATOL`, fp32), every bad one must get
exactly one error reply, and the server must answer a request afterwards. tests/test_serving_batching.py runs it
with a fixed seed; bench/bench_mixed_traffic.py runs bigger ones against a server process.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from websockets.sync.client import connect

from DiT4DiT.serving import wire

ATOL = 1e-5
KINDS = ("good", "malformed", "nan", "dropped")
WEIGHTS = (0.65, 0.15, 0.1, 0.1)  # how often each kind is drawn
INSTRUCTIONS = ("place the bottle", "open the drawer", "stack the blocks", "put the cup in the sink")


@dataclass
class Planned:
    client: int
    number: int
    kind: str  # one of KINDS
    frame: bytes  # what the client sends
    shape: str  # what the request holds, in words (for the outcome's table)


@dataclass
class Outcome:
    """What the run found; `problems` empty when every rule held."""

    counts: Counter = field(default_factory=Counter)  # requests per kind
    shapes: Counter = field(default_factory=Counter)  # well-formed requests per shape
    largest_difference: float = 0.0  # of a well-formed request's actions from its alone run
    problems: list[str] = field(default_factory=list)


def _frame_image(rng, size: int, views: int, as_float: bool) -> np.ndarray:
    pixels = rng.integers(0, 256, (size, size * views, 3), dtype=np.uint8)
    return (pixels / 255.0).astype(np.float32) if as_float else pixels


def _example(rng, meta: dict, views: int, form: str, state: bool, seed: int) -> dict:
    size = int(meta["image_size"])
    example = {"lang": INSTRUCTIONS[int(rng.integers(len(INSTRUCTIONS)))], "seed": seed}
    if form == "views":
        example["views"] = [rng.integers(0, 256, (int(rng.integers(16, 3 * size)), int(rng.integers(16, 3 * size)), 3),
                                         dtype=np.uint8) for _ in range(views)]
    else:
        example["image"] = [_frame_image(rng, size, views, as_float=form == "float image")]
    if state:
        example["state"] = rng.uniform(-1, 1, (1, int(meta["state_dim"]))).astype(np.float32)
    return example


def _good(rng, meta: dict, seed: int) -> tuple[list[dict], str]:
    views = int(rng.integers(1, int(meta["limits"]["max_views"]) + 1))
    form = str(rng.choice(["image", "float image", "views"]))
    state = bool(meta["state_dim"]) and bool(rng.integers(2))
    count = int(rng.integers(1, 4))
    examples = [_example(rng, meta, views, form, state, seed * 8 + k) for k in range(count)]
    return examples, f"{count} example(s), {views} camera(s) as {form}, {'with' if state else 'no'} state"


def _bad(rng, meta: dict, kind: str, seed: int) -> bytes:
    examples, _ = _good(rng, meta, seed)
    first = examples[0]
    if kind == "nan":
        if "state" in first and rng.integers(2):
            first["state"] = np.full_like(first["state"], np.nan)
        else:
            first.pop("views", None)
            first["image"] = [np.full((int(meta["image_size"]), int(meta["image_size"]), 3), np.nan, np.float32)]
        return wire.pack({"examples": examples})
    flaw = int(rng.integers(5))
    if flaw == 0:
        del first["lang"]
    elif flaw == 1:
        first.pop("views", None)
        first["image"] = [np.zeros((int(meta["image_size"]) + 1, int(meta["image_size"]), 3), np.uint8)]
    elif flaw == 2:
        other = _example(rng, meta, 1, "image", "state" in first, seed)
        other["image"] = [np.zeros((int(meta["image_size"]), 2 * int(meta["image_size"]), 3), np.uint8)]
        first.pop("views", None)
        first["image"] = [np.zeros((int(meta["image_size"]), int(meta["image_size"]), 3), np.uint8)]
        examples = [first, other]  # two shapes in one request
    elif flaw == 3:
        return b"\xc1 not msgpack"
    else:
        first["seed"] = -1
    return wire.pack({"examples": examples})


def plan(seed: int, clients: int, requests: int, metadata: dict) -> list[list[Planned]]:
    """Each client's requests, in the order it sends them; the same for the same arguments."""
    rng = np.random.default_rng(seed)
    planned = []
    for client in range(clients):
        own = []
        for number in range(requests):
            kind = str(rng.choice(KINDS, p=WEIGHTS))
            request_seed = int(rng.integers(2**31))
            if kind in ("good", "dropped"):
                examples, shape = _good(rng, metadata, request_seed)
                frame = wire.pack({"examples": examples, "request_id": f"c{client}-{number}"})
            else:
                frame, shape = _bad(rng, metadata, kind, request_seed), kind
            own.append(Planned(client, number, kind, frame, shape))
        planned.append(own)
    return planned


def _open(port: int):
    ws = connect(f"ws://127.0.0.1:{port}", proxy=None, max_size=None, open_timeout=120)
    ws.recv(timeout=120)  # the metadata
    return ws


def metadata(port: int) -> dict:
    with connect(f"ws://127.0.0.1:{port}", proxy=None, max_size=None, open_timeout=120) as ws:
        return wire.unpack(ws.recv(timeout=120))


def send(port: int, planned: list[list[Planned]], timeout_s: float = 300) -> dict[tuple[int, int], list]:
    """Every client at once; {(client, number): the replies that request got} (none for a dropped one)."""
    replies: dict[tuple[int, int], list] = {}
    start = threading.Barrier(len(planned))

    def client(own: list[Planned]):
        ws = _open(port)
        start.wait(timeout=timeout_s)
        try:
            for request in own:
                ws.send(request.frame)
                if request.kind == "dropped":
                    ws.close()  # gone before its answer; back for the rest
                    ws = _open(port)
                    continue
                replies[request.client, request.number] = [wire.unpack(ws.recv(timeout=timeout_s))]
        except Exception as error:  # a reply that never came, a connection the server closed
            replies[own[0].client, -1] = [error]
        finally:
            ws.close()

    threads = [threading.Thread(target=client, args=(own,)) for own in planned]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s * len(planned[0]) + 60)
    return replies


def check(port: int, planned: list[list[Planned]], replies: dict, timeout_s: float = 300) -> Outcome:
    """The rules, against each well-formed request replayed alone; then one more request must be answered."""
    outcome = Outcome()
    for failed in [key for key in replies if key[1] == -1]:
        outcome.problems.append(f"client {failed[0]}: {replies[failed][0]!r}")
    with _open(port) as ws:
        for request in (r for own in planned for r in own):
            outcome.counts[request.kind] += 1
            if request.kind == "dropped":
                continue
            got = replies.get((request.client, request.number), [])
            where = f"client {request.client} request {request.number} ({request.shape})"
            if len(got) != 1:
                outcome.problems.append(f"{where}: {len(got)} replies")
                continue
            (reply,) = got
            if request.kind != "good":
                if reply.get("ok") is not False:
                    outcome.problems.append(f"{where}: a bad request answered {reply.get('ok')!r}")
                continue
            outcome.shapes[request.shape] += 1
            ws.send(request.frame)
            solo = wire.unpack(ws.recv(timeout=timeout_s))
            if not (reply.get("ok") and solo.get("ok")):
                outcome.problems.append(f"{where}: not answered ({reply.get('error') or solo.get('error')})")
                continue
            difference = float(np.abs(reply["data"]["normalized_actions"] -
                                      solo["data"]["normalized_actions"]).max())
            outcome.largest_difference = max(outcome.largest_difference, difference)
            if difference > ATOL:
                outcome.problems.append(f"{where}: actions differ from its run alone by {difference:.2e}")
        last = next(r for own in planned for r in own if r.kind == "good")
        ws.send(last.frame)
        if not wire.unpack(ws.recv(timeout=timeout_s)).get("ok"):
            outcome.problems.append("the server did not answer a request after the traffic")
    return outcome
