"""Requests of every connection gathered into one model forward (the server's one model thread).

A forward takes the oldest waiting request and, in arrival order, every other waiting request whose examples
stack with it (same image shape, state in all or none), up to `max_forward_batch` examples; a request is never
split, so one larger than that runs alone. Requests that arrive while the model is busy are gathered anyway.
Before a forward the oldest request waits for the other connections' requests, up to `max_wait_s`: a connection
has at most one request in flight, so once every open connection has one waiting nothing more can come and the
forward starts at once. A lone client therefore never waits. Each request gets back its own rows of the outputs.
A forward that fails is run again one request at a time, so a request that breaks the model fails alone.

The model thread is a daemon thread: stopping the server (SIGTERM) never waits for a forward in progress; the
requests still waiting or running are answered with ServerStopping.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger("dit4dit.serve")


class QueueFull(RuntimeError):
    """More requests wait than the server's --max_queue; the client should retry later."""


class ServerStopping(RuntimeError):
    """The server stopped before it could answer the request."""


def stack_key(examples: list[dict]) -> tuple:
    """What must match for examples to share a forward: the image frame's shape and whether a state is sent."""
    first = examples[0]
    return tuple(first["image"][0].shape), "state" in first


@dataclass
class Timing:
    queued: float  # perf_counter when the request was queued
    began: float = 0.0  # when its forward started
    ended: float = 0.0  # when its forward finished
    forward_examples: int = 0  # examples in that forward, every request's together


@dataclass
class _Request:
    examples: list[dict]
    key: tuple
    future: asyncio.Future
    timing: Timing = field(default_factory=lambda: Timing(time.perf_counter()))


class Batcher:
    """`await submit(examples)` -> (data, Timing): `infer(examples)` rows of this request, computed in one forward
    with the other requests waiting beside it. `infer` returns arrays with one row per example."""

    def __init__(self, infer: Callable[[list[dict]], dict[str, np.ndarray]], *, max_forward_batch: int,
                 max_wait_s: float, max_queue: int):
        self._infer = infer
        self.max_forward_batch, self.max_wait_s, self.max_queue = max_forward_batch, max_wait_s, max_queue
        self._waiting: deque[_Request] = deque()
        self._changed = threading.Condition()
        self._stopped = False
        self._connections = 0  # open connections: each may add one more request
        self._running: list[_Request] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._serve, name="policy", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    async def submit(self, examples: list[dict]) -> tuple[dict[str, np.ndarray], Timing]:
        request = _Request(examples, stack_key(examples), asyncio.get_running_loop().create_future())
        with self._changed:
            if self._stopped:
                raise ServerStopping("the server is stopping")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"the server is busy: {len(self._waiting)} requests wait for the model (--max_queue "
                                f"{self.max_queue}); retry later")
            self._waiting.append(request)
            self._changed.notify()
        return await request.future, request.timing

    def connected(self, change: int) -> None:
        """A connection opened (+1) or closed (-1)."""
        with self._changed:
            self._connections += change
            self._changed.notify()

    def stop(self) -> None:
        """Answer every waiting and running request with ServerStopping; the model thread ends after its forward."""
        with self._changed:
            self._stopped = True
            unanswered = [*self._waiting, *self._running]
            self._waiting.clear()
            self._changed.notify()
        for request in unanswered:
            self._settle(request, error=ServerStopping("the server stopped before answering"))

    def _serve(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run(batch)

    def _next_batch(self) -> list[_Request] | None:
        with self._changed:
            while not self._waiting and not self._stopped:
                self._changed.wait()
            if self._stopped:
                return None
            oldest = self._waiting[0]
            deadline = oldest.timing.queued + self.max_wait_s
            while (not self._stopped and len(self._waiting) < self._connections
                   and self._gatherable(oldest.key) < self.max_forward_batch and time.perf_counter() < deadline):
                self._changed.wait(deadline - time.perf_counter())
            if self._stopped:
                return None
            batch, size = [], 0
            for request in list(self._waiting):
                fits = size + len(request.examples) <= self.max_forward_batch
                if request.key == oldest.key and (fits or not batch):
                    batch.append(request)
                    size += len(request.examples)
                    self._waiting.remove(request)
            self._running = batch
            return batch

    def _gatherable(self, key: tuple) -> int:
        return sum(len(r.examples) for r in self._waiting if r.key == key)

    def _run(self, batch: list[_Request]) -> None:
        began = time.perf_counter()
        examples = [example for request in batch for example in request.examples]
        try:
            data = self._infer(examples)
        except Exception as error:
            if len(batch) == 1:
                self._finish(batch, began, error=error)
            else:
                log.warning("a forward of %d requests failed (%s: %s); running them one at a time", len(batch),
                            type(error).__name__, error)
                for request in batch:
                    self._run([request])
            return
        self._finish(batch, began, data=data, examples=len(examples))

    def _finish(self, batch: list[_Request], began: float, *, data=None, error=None, examples: int = 0) -> None:
        ended, start = time.perf_counter(), 0
        for request in batch:
            request.timing.began, request.timing.ended = began, ended
            request.timing.forward_examples = examples
            if error is not None:
                self._settle(request, error=error)
                continue
            rows = slice(start, start + len(request.examples))
            start = rows.stop
            self._settle(request, result={name: value[rows] for name, value in data.items()})
        with self._changed:
            self._running = []

    def _settle(self, request: _Request, result=None, error=None) -> None:
        def settle():
            if request.future.done():  # already answered by stop()
                return
            if error is not None:
                request.future.set_exception(error)
            else:
                request.future.set_result(result)

        try:
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop closed: the server has stopped and nobody waits for the answer
            pass
