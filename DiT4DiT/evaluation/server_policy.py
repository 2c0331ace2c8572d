"""The client side of a closed loop: requests to our policy server for action chunks, their rows one per step
(serving.client.ChunkQueue decides when to ask and which rows run: sync, async or real-time chunking).

The simulators' adapters (metaworld, libero) subclass ChunkedPolicy and turn a row of the dataset's action layout
into their env's action. Each request carries a noise seed made from the episode and the step (request_seed), so a
served policy's episodes do not depend on how many environment processes share the server or how it batches.
"""

from __future__ import annotations

import time
from typing import TypedDict

import numpy as np

from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.evaluation.observations import StateEncoder, camera_fields


def server_address(server: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT, or a BadArgument naming it."""
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise BadArgument(f"--server {server!r}: give HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:10093")
    return host, int(port)


def connect(server: str, wait_s: float):
    """A PolicyClient for HOST:PORT, or a SimulatorError saying how to start a server."""
    return connect_to(*server_address(server), wait_s)


def connect_to(host: str, port: int, wait_s: float):
    """A PolicyClient for `host`:`port`, or a SimulatorError saying how to start a server; a server that refuses
    us raises the client's ServerError (one line through run_main)."""
    from DiT4DiT.serving.client import PolicyClient

    server = f"{host}:{port}"
    try:
        return PolicyClient(host, port, wait_s=wait_s, retry_s=min(1.0, wait_s))
    except (TimeoutError, OSError) as error:
        reason = str(error) if isinstance(error, TimeoutError) else f"cannot reach the policy server at {server} ({error})"
        raise SimulatorError(f"{reason}; start one with "
                             "`python -m DiT4DiT.serving.server --ckpt RUN/checkpoints/steps_N_pytorch_model.pt`") from None


def request_seed(episode: tuple[int, ...], step: int) -> int:
    """The example seed of the request an episode makes at policy step `step` (0, chunk, 2 chunk, ...): the first
    64-bit word of numpy's SeedSequence([*episode, step]) with its top bit dropped (the server takes 0..2^63-1).
    `episode` names the episode by non-negative integers: (seed,) on Meta-World, (seed, task id, trial) on LIBERO."""
    word = np.random.SeedSequence([*episode, step]).generate_state(1, np.uint64)[0]
    return int(word >> np.uint64(1))


class Execution(TypedDict, total=False):
    """How ChunkedPolicy runs the served chunks: its keyword arguments (their defaults where one is left out)."""

    execution: str
    inference_delay: int
    execution_horizon: int | None


class ChunkedPolicy:
    """Asks the server for action chunks and returns their rows one per step (next_row), executed as
    serving.client.ChunkQueue says: `sync` (default: one request every `action_chunk` steps, the rows in order, the
    original's loop), `async` or `rtc`.

    `inference_delay` D simulates a slow model without a clock: a request's reply becomes usable D policy steps
    after it was sent, and meanwhile the old chunk's rows keep executing (async, rtc) or, in sync, nothing does
    (next_row returns None: the adapter holds the robot still). `execution_horizon`: how many rows are left when
    async and rtc ask (default max(D, chunk / 2)). seam_jumps() gives the episode's jumps at changes of chunk.

    blank_images=True sends black frames: what the model makes of the state alone. reset(episode) starts an
    episode; its requests carry request_seed(episode, step) as the example's "seed" (an extra example key, which the
    original's server ignores: there the noise stays fresh).
    """

    sees = True  # it looks at the views, so the adapter must render them

    def __init__(self, client, blank_images: bool = False, *, execution: str = "sync", inference_delay: int = 0,
                 execution_horizon: int | None = None):
        from DiT4DiT.serving.client import ChunkQueue, supports_rtc

        meta = self.metadata = client.metadata
        self.client = client
        self.action_dim = int(meta["action_dim"])
        self.chunk = int(meta["action_chunk"])
        self.encode_state = StateEncoder(meta) if int(meta["state_dim"]) else None
        self.blank_images = blank_images
        if execution == "rtc" and not supports_rtc(meta):
            raise SimulatorError("--execution rtc: the server names no real-time chunking support (the original's "
                                 "server?); serve the run with `python -m DiT4DiT.serving.server`")
        if not 0 <= inference_delay < self.chunk:
            raise BadArgument(f"--inference_delay {inference_delay}: give 0 to {self.chunk - 1} policy steps (below "
                              f"the served chunk of {self.chunk})")
        horizon = max(inference_delay, self.chunk // 2) if execution_horizon is None else execution_horizon
        if not inference_delay <= horizon <= self.chunk:
            raise BadArgument(f"--execution_horizon {horizon}: give {inference_delay} (the delay) to {self.chunk} (the "
                              "chunk) rows left when the next chunk is asked for")
        self.execution, self.inference_delay, self.execution_horizon = execution, inference_delay, horizon
        self._make_queue = lambda: ChunkQueue(execution, horizon, (meta.get("rtc") or {}).get("max_delay"))
        self.latencies_s: list[float] = []  # one per request
        self._queue = self._make_queue()
        self._reply: dict | None = None  # a reply not usable yet
        self._wait = 0  # steps until it is
        self._step = 0
        self._episode: tuple[int, ...] = ()

    def reset(self, episode: tuple[int, ...]) -> None:
        self._queue, self._reply, self._wait = self._make_queue(), None, 0
        self._step, self._episode = 0, tuple(int(part) for part in episode)

    def seam_jumps(self) -> list[float]:
        """This episode's jumps between the last row run from one chunk and the first from the next (robot units)."""
        return self._queue.seam_jumps()

    def step_changes(self) -> list[float]:
        """This episode's changes between consecutive rows of one chunk (robot units): a seam jump's scale."""
        return self._queue.step_changes

    def next_row(self, views, state, instruction: str) -> np.ndarray | None:
        """This step's row (the dataset's action units), or None while the robot waits for a chunk (sync with a
        delay, or the chunk used up before the reply)."""
        queue = self._queue
        if self._reply is not None and self._wait == 0:
            queue.received(self._reply)
            self._reply = None
        if queue.wants_request():
            fields = queue.request_fields(self.inference_delay)
            self._reply, self._wait = self._ask(views, state, instruction, fields), self.inference_delay
            queue.sent(fields)
            if self._wait == 0:
                queue.received(self._reply)
                self._reply = None
        row = queue.pop()
        self._wait = max(0, self._wait - 1)
        self._step += 1
        return row

    def _ask(self, views, state, instruction: str, fields: dict) -> dict:
        if self.blank_images:
            views = [np.zeros_like(view) for view in views]
        example = {**camera_fields(views, self.metadata), "lang": instruction,
                   "seed": request_seed(self._episode, self._step), **fields}
        if self.encode_state is not None:
            example["state"] = self.encode_state(state)
        started = time.perf_counter()
        try:
            reply = self.client.infer([example])
        except Exception as error:  # a server error or a dropped connection ends the evaluation
            raise SimulatorError(f"the policy server failed on a request: {error}") from None
        self.latencies_s.append(time.perf_counter() - started)
        return reply
