"""Client of the policy server (the original's protocol): connect, read metadata, send requests, get replies; and
the robot side of action chunking: ChunkQueue (which rows to execute, when to ask) and ChunkExecutor (a control
loop at a fixed rate, with sync, async or real-time-chunking execution)."""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.serving import wire

log = logging.getLogger(__name__)


class ServerError(DiT4DiTError, RuntimeError):
    """The server refused us (a token it needs) or answered with an error (its message included) or a traceback.
    An entry point's run_main prints it as one line and exits 1; callers that caught RuntimeError still do."""


class PolicyClient:
    """`PolicyClient(host, port)`; `.metadata`; `.predict_action(query)` returns the whole reply like the original's
    client; `.infer(examples)` returns its `data` or raises ServerError. `token` (default: $DIT4DIT_SERVER_TOKEN)
    is sent as the original's client sends its api_key."""

    def __init__(self, host: str = "127.0.0.1", port: int = 10093, *, token: str | None = None,
                 wait_s: float = 300.0, retry_s: float = 2.0):
        self.uri = f"ws://{host}:{port}"
        self._ids = itertools.count()
        self._ws, self.metadata = self._connect(token or os.environ.get(wire.TOKEN_ENV), wait_s, retry_s)

    def _connect(self, api_key, wait_s: float, retry_s: float) -> tuple[ClientConnection, dict]:
        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                # proxy=None: a robot's HTTP(S)_PROXY must not capture a connection to the policy server.
                ws = connect(self.uri, compression=None, max_size=None, additional_headers=headers, open_timeout=150,
                             ping_interval=20, ping_timeout=20, proxy=None)
                return ws, wire.unpack(ws.recv())
            except InvalidStatus as refused:
                if refused.response.status_code == 401:
                    raise ServerError(f"{self.uri} requires a token: pass token= or set {wire.TOKEN_ENV}") from None
                raise
            except ConnectionRefusedError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no policy server at {self.uri} after {wait_s:.0f} s") from None
                log.info("waiting for the policy server at %s", self.uri)
                time.sleep(retry_s)

    def predict_action(self, query: dict) -> dict:
        self._ws.send(wire.pack(query))
        reply = self._ws.recv()
        if isinstance(reply, str):
            raise ServerError(f"the policy server failed:\n{reply}")
        return wire.unpack(reply)

    def infer(self, examples: list[dict], **options) -> dict:
        """data of the reply: normalized_actions and actions, each (B, chunk, dim)."""
        request_id = f"{id(self):x}-{next(self._ids)}"
        reply = self.predict_action({"type": "infer", "request_id": request_id, "examples": examples, **options})
        if not reply.get("ok"):
            raise ServerError(f"request {request_id}: {reply.get('error', {}).get('message', reply)}")
        return reply["data"]

    def ping(self) -> bool:
        return bool(self.predict_action({"type": "ping"}).get("ok"))

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> "PolicyClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- executing chunks ----------------------------------------------------------------------------------------

EXECUTION_MODES = ("sync", "async", "rtc")
DELAY_WINDOW = 5  # the last inferences whose delays (in actions consumed) bound the next request's inference_delay


def supports_rtc(metadata: dict) -> bool:
    """Whether the server takes real-time chunking's keys (ours names its `rtc` support in its metadata; the
    original's sends only {"env": "simpler_env"})."""
    return isinstance(metadata.get("rtc"), dict)


@dataclass
class Switch:
    """One change of chunk: how many actions the robot consumed while the new chunk was computed (the new chunk's
    rows it skips), the inference_delay the request carried, and the jump at the seam (robot units, L2) between
    the last action executed from the old chunk and the first from the new one."""

    consumed: int
    delay_sent: int | None
    jump: float | None = None


class ChunkQueue:
    """A robot's action chunks and when to ask for the next one, with no clock of its own: the real-time
    ChunkExecutor and the simulators' closed loops drive it.

    - sync: ask when the chunk is used up, and wait (the robot holds) for the reply; the original's behaviour.
    - async: ask while `execution_horizon` rows of the chunk are left and keep executing them; the reply then
      replaces the chunk, from the row for the actions consumed since the request (naive asynchrony: the two
      chunks need not agree at the seam).
    - rtc: as async, and the request carries the leftover rows (normalised), the delay and where the guided
      overlap ends, so the server's chunk continues the old one (real-time chunking).
    Rows are executed in the robot's units (the reply's `actions`; `normalized_actions` from the original's server,
    which sends nothing else). `switches` records every change of chunk, `step_changes` the change between
    consecutive rows of one chunk (robot units, L2): the scale a seam jump compares with.
    """

    def __init__(self, mode: str = "sync", execution_horizon: int | None = None, max_delay: int | None = None):
        if mode not in EXECUTION_MODES:
            raise ValueError(f"execution mode {mode!r}: use one of {', '.join(EXECUTION_MODES)}")
        self.mode, self.execution_horizon, self.max_delay = mode, execution_horizon, max_delay
        self.switches: list[Switch] = []
        self.step_changes: list[float] = []
        self._rows: np.ndarray | None = None  # robot units
        self._normalized: np.ndarray | None = None
        self._next = 0  # index of the next row to execute
        self._pending: Switch | None = None  # a request in flight
        self._last: np.ndarray | None = None  # the last row executed
        self._seam = False  # the next row executed is a new chunk's first

    def remaining(self) -> int:
        return 0 if self._rows is None else len(self._rows) - self._next

    @property
    def in_flight(self) -> bool:
        return self._pending is not None

    def wants_request(self) -> bool:
        if self._pending is not None:
            return False
        if self._rows is None or self.mode == "sync":
            return self.remaining() == 0
        return self.remaining() <= self._horizon(self._rows)

    def _horizon(self, rows: np.ndarray) -> int:
        return len(rows) // 2 if self.execution_horizon is None else self.execution_horizon

    def request_fields(self, delay: int) -> dict:
        """The example keys this request adds: real-time chunking's in rtc mode once a chunk runs, else none.
        `delay`: the actions expected to run before the reply (capped by the leftover and the server's max)."""
        left = self.remaining()
        if self.mode != "rtc" or left == 0 or self._rows is None or self._normalized is None:
            return {}
        delay = min(delay, left, len(self._rows) - 1, *([self.max_delay] if self.max_delay is not None else []))
        return {"prev_actions": np.ascontiguousarray(self._normalized[self._next:], dtype=np.float32),
                "inference_delay": int(delay), "execution_horizon": left}

    def sent(self, fields: dict) -> None:
        self._pending = Switch(consumed=0, delay_sent=fields.get("inference_delay"))

    def received(self, data: dict) -> Switch:
        """The reply's chunk (its first example) replaces the current one, skipping the rows whose time passed."""
        switch, self._pending = self._pending, None
        if switch is None:
            raise RuntimeError("ChunkQueue.received() with no request in flight: call sent() when the request goes out")
        normalized = np.asarray(data["normalized_actions"][0])
        self._rows = np.asarray(data["actions"][0]) if "actions" in data else normalized
        self._normalized = normalized
        self._next = min(switch.consumed, len(self._rows))
        self._seam = self._last is not None
        self.switches.append(switch)
        return switch

    def pop(self) -> np.ndarray | None:
        """The next row to execute, or None when the chunk is used up (the robot holds until a reply)."""
        if self._rows is None or self.remaining() == 0:
            return None
        row = self._rows[self._next]
        self._next += 1
        if self._pending is not None:
            self._pending.consumed += 1
        change = None if self._last is None else float(np.linalg.norm(np.asarray(row, np.float64) - self._last))
        if self._seam:
            self.switches[-1].jump = change
            self._seam = False
        elif change is not None:
            self.step_changes.append(change)
        self._last = np.asarray(row, dtype=np.float64)
        return row

    def seam_jumps(self) -> list[float]:
        return [s.jump for s in self.switches if s.jump is not None]


@dataclass
class ExecutorReport:
    """What a ChunkExecutor run did: its ticks, the ticks at which the robot had no action and held until a reply
    came, the seconds it held in all, and every switch of chunk."""

    mode: str
    ticks: int
    held_ticks: int
    held_s: float
    switches: list[Switch] = field(default_factory=list)


class ChunkExecutor:
    """Runs a served policy on a robot at a control rate: `observe()` gives the example to ask with (image or
    views, lang, state, ...), `act(row)` executes one action (robot units; from the original's server, which
    returns only normalised actions, the normalised row).

    The next chunk is asked for `execution_horizon` rows before the end (default: half the chunk) on a thread of
    its own while the current rows keep executing (`async`, `rtc`); `sync` asks when the chunk is used up and
    holds. The delay is counted in actions actually consumed between the request and the reply; an rtc request
    carries the largest of the last DELAY_WINDOW such counts as its inference_delay. Against a server without
    real-time chunking (the original's) every mode runs as `sync`, with one warning.
    """

    def __init__(self, client: PolicyClient, observe, act, *, rate_hz: float, mode: str = "rtc",
                 execution_horizon: int | None = None):
        if not rate_hz > 0:
            raise ValueError(f"rate_hz {rate_hz}: give the control rate in Hz, above 0")
        if mode != "sync" and not supports_rtc(client.metadata):
            log.warning("the server at %s names no real-time chunking support (the original's server?): "
                        "executing its chunks in sync mode, not %s", client.uri, mode)
            mode = "sync"
        rtc = client.metadata.get("rtc") or {}
        self.client, self.observe, self.act, self.period = client, observe, act, 1.0 / rate_hz
        self.queue = ChunkQueue(mode, execution_horizon, rtc.get("max_delay"))
        self._delays: list[int] = []
        self._reply: queue.Queue = queue.Queue(maxsize=1)
        self._worker: threading.Thread | None = None

    def _ask(self) -> None:
        fields = self.queue.request_fields(max(self._delays[-DELAY_WINDOW:], default=0))
        example = {**self.observe(), **fields}
        self.queue.sent(fields)

        def request():
            try:
                self._reply.put(self.client.infer([example]))
            except Exception as error:  # handed to the control loop, which raises it
                self._reply.put(error)

        self._worker = threading.Thread(target=request, name="chunk-request", daemon=True)
        self._worker.start()

    def _take(self, block: bool) -> None:
        try:
            reply = self._reply.get(block=block)
        except queue.Empty:
            return
        if isinstance(reply, Exception):
            raise reply
        self._delays.append(self.queue.received(reply).consumed)

    def run(self, ticks: int) -> ExecutorReport:
        """Execute `ticks` control steps, one action each; a tick with no action left holds until the reply."""
        held, held_s, deadline = 0, 0.0, time.monotonic()
        for _ in range(ticks):
            self._take(block=False)
            if self.queue.wants_request():
                self._ask()
            row = self.queue.pop()
            while row is None:  # nothing left to execute: the robot holds until a reply
                started = time.monotonic()
                if not self.queue.in_flight:
                    self._ask()
                self._take(block=True)
                if self.queue.wants_request():  # the new chunk may start within the horizon already
                    self._ask()
                held, held_s = held + 1, held_s + time.monotonic() - started
                deadline = time.monotonic()  # the control loop restarts from the reply
                row = self.queue.pop()
            self.act(row)
            deadline += self.period
            time.sleep(max(0.0, deadline - time.monotonic()))
        if self.queue.in_flight:
            self._take(block=True)  # no request outlives the run
        return ExecutorReport(self.queue.mode, ticks, held, round(held_s, 4), list(self.queue.switches))
