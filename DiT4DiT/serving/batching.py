"""Requests of every connection gathered into one model forward (the server's one model thread).

A forward takes the oldest waiting request and, in arrival order, every other waiting request whose examples
stack with it (same image shape, state in all or none), up to `max_forward_batch` examples; a request is never
split, so one larger than that runs alone. Requests that arrive while the model is busy are gathered anyway.
Before a forward the oldest request waits for the other connections' requests, up to `max_wait_s`: a connection
has at most one request in flight, so once every open connection has one waiting nothing more can come and the
forward starts at once. A lone client therefore never waits. Each request gets back its own rows of the outputs.
A forward that fails is run again one request at a time, so a request that breaks the model fails alone.

Every request is answered exactly once, with its rows or with an error naming the cause:
- a failure in the model thread outside a forward (taking a batch, handing back rows) answers the requests it
  held (the batch, or the oldest waiting request it was gathering for) and the thread goes on; after
  MAX_FAILURES_IN_A_ROW such failures with no forward between them it cannot go on and ends;
- when the thread ends for any reason but stop(), it refuses new requests, and `on_death(error)` tells the server,
  whose stop() then answers every request still waiting with ModelThreadDied (the server exits non-zero);
- a request not answered within `request_timeout_s` gets RequestTimedOut (and leaves the queue if still there).

The model thread is a daemon thread: stopping the server (SIGTERM) never waits for a forward in progress; the
requests still waiting or running are answered with ServerStopping. `health()` says whether a supervisor should
consider the thread alive and answering (docs/serving.md, /healthz).
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

# Failures outside a forward with no forward between them after which the model thread stops (a fault that
# repeats with every request is a broken server, better restarted than answering errors for good).
MAX_FAILURES_IN_A_ROW = 3


class QueueFull(RuntimeError):
    """More requests wait than the server's --max_queue; the client should retry later."""


class ServerStopping(RuntimeError):
    """The server stopped before it could answer the request."""


class ModelThreadDied(ServerStopping):
    """The model thread ended; the server stops and exits non-zero so that a supervisor restarts it."""


class RequestTimedOut(RuntimeError):
    """No answer within --request_timeout_s."""


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


# eq=False: a request is itself and nothing else. The generated __eq__ compared the examples' arrays, so taking a
# request out of the queue by value raised "truth value of an array ... is ambiguous" and killed the thread.
@dataclass(eq=False)
class _Request:
    examples: list[dict]
    key: tuple
    future: asyncio.Future
    timing: Timing = field(default_factory=lambda: Timing(time.perf_counter()))


class Batcher:
    """`await submit(examples)` -> (data, Timing): `infer(examples)` rows of this request, computed in one forward
    with the other requests waiting beside it. `infer` returns arrays with one row per example."""

    def __init__(self, infer: Callable[[list[dict]], dict[str, np.ndarray]], *, max_forward_batch: int,
                 max_wait_s: float, max_queue: int, request_timeout_s: float,
                 on_death: Callable[[BaseException | None], None] | None = None):
        """`on_death(error)` runs on the event loop when the model thread ends without stop() (error: what ended
        it, None when it returned)."""
        self._infer = infer
        self.max_forward_batch, self.max_wait_s, self.max_queue = max_forward_batch, max_wait_s, max_queue
        self.request_timeout_s = request_timeout_s
        self._on_death = on_death
        self._waiting: deque[_Request] = deque()
        self._changed = threading.Condition()
        self._stopped = False
        self._death: str | None = None  # why the model thread ended, once it has
        self._connections = 0  # open connections: each may add one more request
        self._running: list[_Request] = []
        self._forward_began: float | None = None  # perf_counter when the forward in progress began
        self._unanswered: set[_Request] = set()  # submitted, not yet answered (touched on the event loop only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._serve, name="policy", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    async def submit(self, examples: list[dict]) -> tuple[dict[str, np.ndarray], Timing]:
        request = _Request(examples, stack_key(examples), asyncio.get_running_loop().create_future())
        with self._changed:
            if self._stopped:
                raise ModelThreadDied(self._death) if self._death else ServerStopping("the server is stopping")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"the server is busy: {len(self._waiting)} requests wait for the model (--max_queue "
                                f"{self.max_queue}); retry later")
            self._waiting.append(request)
            self._changed.notify()
        self._unanswered.add(request)
        try:
            return await asyncio.wait_for(request.future, self.request_timeout_s), request.timing
        except asyncio.TimeoutError:
            with self._changed:
                queued = request in self._waiting  # identity (eq=False)
                if queued:
                    self._waiting.remove(request)
            where = "still waiting for the model" if queued else "in a forward that had not ended"
            raise RequestTimedOut(f"no answer within {self.request_timeout_s:g} s (--request_timeout_s): the request "
                                  f"was {where}; the server may be overloaded or its model stuck") from None
        finally:
            self._unanswered.discard(request)

    def connected(self, change: int) -> None:
        """A connection opened (+1) or closed (-1)."""
        with self._changed:
            self._connections += change
            self._changed.notify()

    def stop(self) -> None:
        """On the event loop: answer every request not yet answered (ModelThreadDied naming the cause if the model
        thread ended, else ServerStopping); the model thread ends after its forward."""
        with self._changed:
            self._stopped = True
            self._waiting.clear()
            self._changed.notify()
        for request in list(self._unanswered):
            if not request.future.done():
                request.future.set_exception(ModelThreadDied(self._death) if self._death else
                                             ServerStopping("the server stopped before answering"))

    def health(self) -> str | None:
        """None while the model thread is alive and nothing has waited longer than request_timeout_s (the oldest
        waiting request, or the forward in progress); otherwise what is wrong, in words."""
        if self._death or not self._thread.is_alive():
            return self._death or "the model thread is not running"
        with self._changed:
            if self._stopped:
                return "the server is stopping"
            now = time.perf_counter()
            oldest = min([r.timing.queued for r in self._waiting] + [self._forward_began or now])
        if now - oldest > self.request_timeout_s:
            return (f"the model has not answered for {now - oldest:.0f} s, longer than --request_timeout_s "
                    f"{self.request_timeout_s:g} (a forward stuck, or the model far slower than its traffic)")
        return None

    # -- the model thread -------------------------------------------------------------------------------------

    def _serve(self) -> None:
        failures, ended = 0, None
        try:
            while True:
                try:
                    batch = self._next_batch()
                    if batch is None:
                        return
                    self._run(batch)
                    failures = 0
                except Exception as error:  # outside a forward: its requests get the error, the thread goes on
                    failures += 1
                    log.exception("the model thread failed outside a forward (%d in a row)", failures)
                    self._answer_held(error)
                    if failures >= MAX_FAILURES_IN_A_ROW:
                        raise
        except BaseException as error:
            ended = error
        finally:
            self._ended(ended)

    def _answer_held(self, error: Exception) -> None:
        """The requests the thread held when `error` came: the batch taken, or (while taking one) the oldest."""
        with self._changed:
            held, self._running, self._forward_began = self._running, [], None
            if not held and self._waiting:
                held = [self._waiting.popleft()]
        for request in held:
            self._settle(request, error=RuntimeError(f"the server failed while handling the request "
                                                     f"({type(error).__name__}: {error})"))

    def _ended(self, error: BaseException | None) -> None:
        with self._changed:
            if self._stopped and self._death is None:  # stop(): the expected end
                return
            cause = f"{type(error).__name__}: {error}" if error is not None else "it returned"
            self._death = f"the model thread stopped ({cause}); the server is exiting"
            self._stopped = True
            self._changed.notify()
        if self._on_death is not None and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._on_death, error)
            except RuntimeError:  # the loop closed: the server has stopped already
                pass

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
            return self._take(oldest.key)

    def _take(self, key: tuple) -> list[_Request]:
        """With the lock held: the batch for `key`, out of the queue (by identity) and into _running."""
        batch: list[_Request] = []
        size = 0
        for request in self._waiting:
            fits = size + len(request.examples) <= self.max_forward_batch
            if request.key == key and (fits or not batch):
                batch.append(request)
                size += len(request.examples)
        taken = {id(request) for request in batch}
        self._waiting = deque(request for request in self._waiting if id(request) not in taken)
        self._running = batch
        return batch

    def _gatherable(self, key: tuple) -> int:
        return sum(len(r.examples) for r in self._waiting if r.key == key)

    def _run(self, batch: list[_Request]) -> None:
        began = time.perf_counter()
        with self._changed:
            self._running, self._forward_began = batch, began
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
            self._running, self._forward_began = [], None

    def _settle(self, request: _Request, result=None, error=None) -> None:
        assert self._loop is not None  # start() sets the loop before it starts the model thread, the only caller

        def settle():
            if request.future.done():  # already answered (stop(), or its wait timed out)
                return
            if error is not None:
                request.future.set_exception(error)
            else:
                request.future.set_result(result)

        try:
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop closed: the server has stopped and nobody waits for the answer
            pass
