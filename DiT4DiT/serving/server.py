"""Websocket policy server speaking the original DiT4DiT protocol (UPSTREAM_SPEC §8).

    python -m DiT4DiT.serving.server --ckpt RUN/checkpoints/steps_N_pytorch_model.pt [--port 10093] [--device auto]

Safe by default: it listens on 127.0.0.1 (`--host 0.0.0.0` opens it to the network, with a warning); with
`--token` (or DIT4DIT_SERVER_TOKEN) a connection must carry `Authorization: Api-Key <token>` (what the original's
client sends for its api_key); one request's size is bounded by the model's metadata (batch, views, frames,
instruction length), so no request can grow the process by more than that. Per connection the server first sends its metadata, then answers each binary msgpack frame:
`{"type": "ping"}` -> `{status: "ok", ok: true, type: "ping", request_id}`; `{"examples": [...], ...}` (type
"infer", the default, or "predict_action") -> `{status: "ok", ok: true, type: "inference_result", request_id,
data: {normalized_actions, actions}}`. A request it cannot answer gets `{status: "error", ok: false, type,
request_id, error: {message}}` and the connection stays open. One model thread runs the requests of all
connections: those waiting together (several clients, or several examples in one request) go through one forward
of at most --max_forward_batch examples (serving/batching.py), and each reply carries only its own rows. An
example's optional "seed" fixes its noise, so its actions are the same alone or batched.

For supervisors: `GET /healthz` on the same port (plain HTTP, no token) answers 200 `ok` while the model thread is
alive and nothing has waited longer than --request_timeout_s, 503 with the reason otherwise. A request not answered
within --request_timeout_s gets an error reply. If the model thread ends, the server stops accepting, answers every
waiting request with an error, says why in one line and exits 1, so that a supervisor restarts it. With
--owner_pid it stops when that process ends (a server started for one run, e.g. by the closed-loop side process).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from urllib.parse import urlsplit

import numpy as np
import websockets
from websockets.asyncio.server import ServerConnection, serve

from DiT4DiT.host import process_lifetime
from DiT4DiT.errors import DiT4DiTError, run_main
from DiT4DiT.logging_setup import configure_logging
from DiT4DiT.model.framework.base_framework import BASE_MODEL_ENV
from DiT4DiT.serving import wire
from DiT4DiT.serving.batching import Batcher, QueueFull, RequestTimedOut, ServerStopping
from DiT4DiT.serving.device import DEVICE_CHOICES
from DiT4DiT.serving.policy import MAX_SAMPLING_STEPS, Policy, RequestError
from DiT4DiT.serving.stage_timing import reply_timing

log = logging.getLogger("dit4dit.serve")

INFER_TYPES = ("infer", "predict_action")
# Incoming frames websockets may buffer per connection (its default is 16): each may be a whole request.
QUEUED_FRAMES = 2
# Batching defaults, measured with bench/bench_serving.py on CPU (docs/serving.md): waiting up to 5 ms for the other
# connections' requests gave 1.2-1.6x the requests/s of no wait at 4 clients, the same at 8; a lone client never
# waits. 8 examples a forward.
MAX_FORWARD_BATCH = 8
MAX_WAIT_MS = 5.0
MAX_QUEUE = 64
# Refused connections (no or wrong token) are logged at most once per this many seconds, with a count.
REFUSAL_LOG_INTERVAL_S = 10.0
# A request's longest wait for its answer: generous, so that only a stuck or hopelessly overloaded model hits it
# (a full-size forward on a CPU takes tens of seconds; on a device well under one).
REQUEST_TIMEOUT_S = 300.0
MAX_REQUEST_TIMEOUT_S = 86_400.0
HEALTH_PATH = "/healthz"
# When the server stops: how long the replies already answered get to leave before the connections close.
REPLY_GRACE_S = 5.0
# --max_message_mb: from a tenth of a MiB (a tiny model's request is ~10 KB) to 64 GiB.
MESSAGE_MB_RANGE = (0.1, 65_536.0)
MAX_IDLE_TIMEOUT_S = 30 * 86_400.0


class ServerFailed(DiT4DiTError):
    """The server cannot go on serving (its model thread ended): exit 1, so that a supervisor restarts it."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: whatever it resolves to, it is not only this machine
        return False


def reply_id(message: dict):
    """The request's id as the reply may carry it: plain scalars as sent, anything else as text."""
    value = message.get("request_id", "default")
    return value if isinstance(value, (str, int, float, bool)) or value is None else repr(value)[:200]


def ok_reply(kind: str, request_id, **fields) -> dict:
    return {"status": "ok", "ok": True, "type": kind, "request_id": request_id, **fields}


def error_reply(kind: str, request_id, message: str) -> dict:
    return {"status": "error", "ok": False, "type": kind, "request_id": request_id, "error": {"message": message}}


class PolicyServer:
    def __init__(self, policy: Policy, host: str = "127.0.0.1", port: int = 10093, *,
                 max_message_bytes: int | None = None, idle_timeout: float = -1, token: str | None = None,
                 max_forward_batch: int = MAX_FORWARD_BATCH, max_wait_ms: float = MAX_WAIT_MS,
                 max_queue: int = MAX_QUEUE, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 owner_pid: int | None = None):
        self.policy = policy
        self.host, self.port = host, port
        self.owner_pid = owner_pid
        # Default: the largest request the model's bounds allow (larger frames close with 1009).
        self.max_message_bytes = max_message_bytes or policy.shape.max_message_bytes()
        self.idle_timeout = idle_timeout
        self._token = token or None
        self._metadata = wire.pack(policy.metadata())
        self._batcher = Batcher(policy.infer, max_forward_batch=max_forward_batch, max_wait_s=max_wait_ms / 1e3,
                                max_queue=max_queue, request_timeout_s=request_timeout_s,
                                on_death=self._model_thread_ended)
        self._refusals = RefusalLog(REFUSAL_LOG_INTERVAL_S)
        self._last_message = time.monotonic()
        self._answering = 0  # requests received whose reply has not been sent yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self.failure: str | None = None  # why the server could not go on (run() raises ServerFailed with it)

    async def run(self, on_ready=None) -> None:
        """Serve until stop() (or SIGTERM/SIGINT when installed, or the owner's end); on_ready(port) once
        listening. ServerFailed when the model thread ended."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._batcher.start(self._loop)
        async with serve(self._connection, self.host, self.port, compression=None, max_size=self.max_message_bytes,
                         max_queue=QUEUED_FRAMES, process_request=self._process_request) as server:
            self.port = server.sockets[0].getsockname()[1]
            if not is_loopback(self.host):
                log.warning("listening on %s: beyond this machine, anyone who can reach port %d can use the model%s",
                            self.host, self.port, "" if self._token else "; pass --token to require a shared token")
            log.info("serving %s on ws://%s:%d%s (health: http://%s:%d%s)", type(self.policy.model).__name__,
                     self.host, self.port, " (token required)" if self._token else "", self.host, self.port,
                     HEALTH_PATH)
            if on_ready is not None:
                on_ready(self.port)
            watchers = [asyncio.ensure_future(self._idle_watchdog())] if self.idle_timeout > 0 else []
            if self.owner_pid is not None:
                watchers.append(asyncio.ensure_future(self._owner_watchdog(self.owner_pid)))
            await self._stopping.wait()
            for watcher in watchers:
                watcher.cancel()
            server.server.close()  # accept nothing more
            # Requests waiting or in a forward are answered now: stopping never waits for the model.
            self._batcher.stop()
            await self._replies_sent(REPLY_GRACE_S)
            server.close()
            await server.wait_closed()
        self._refusals.flush()
        if self.failure is not None:
            raise ServerFailed(self.failure)
        log.info("stopped")

    def stop(self) -> None:
        """Thread-safe: close the listener and every connection, then return from run()."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    def install_signal_handlers(self) -> None:
        """From within run() (its on_ready): SIGTERM and SIGINT stop the server."""
        if self._loop is None:
            raise RuntimeError("install_signal_handlers() before run(): the handlers need run()'s event loop")
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(signum, self._stop_now)

    def _stop_now(self) -> None:
        """On the loop, from within run(): run() closes everything and returns."""
        if self._stopping is None:
            raise RuntimeError("the server is not running: run() creates the event that stops it")
        self._stopping.set()

    def _model_thread_ended(self, error: BaseException | None) -> None:
        """On the loop: the model thread ended without stop(). Stop; run() then raises ServerFailed."""
        cause = f"{type(error).__name__}: {error}" if error is not None else "it returned"
        self.failure = (f"the model thread stopped ({cause}); the waiting requests were answered with an error. "
                        "Exiting 1 so that a supervisor restarts the server")
        self._stop_now()

    async def _replies_sent(self, grace_s: float) -> None:
        """Wait (at most grace_s) until every request received has had its reply sent."""
        deadline = time.monotonic() + grace_s
        while self._answering and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _owner_watchdog(self, owner_pid: int) -> None:
        await process_lifetime.until_ended(owner_pid)
        log.info("the process that started this server (--owner_pid %d) has ended: stopping", owner_pid)
        self._stop_now()

    async def _idle_watchdog(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.idle_timeout))
            if time.monotonic() - self._last_message > self.idle_timeout:
                log.info("no request for %ss (--idle_timeout): stopping", self.idle_timeout)
                self._stop_now()
                return

    def _process_request(self, connection: ServerConnection, request):
        """Before the handshake: GET /healthz is answered here (no token: it tells only the state); other requests
        go on to the token check."""
        if urlsplit(request.path).path == HEALTH_PATH:
            problem = self._batcher.health()
            return connection.respond(200, "ok\n") if problem is None else connection.respond(503, f"{problem}\n")
        return self._check_token(connection, request)

    def _check_token(self, connection: ServerConnection, request):
        """Before the handshake completes: with a token, refuse (401) a connection that lacks it."""
        if self._token is None:
            return None
        sent = request.headers.get("Authorization", "")
        scheme, _, value = sent.partition(" ")
        # websockets decodes header bytes with surrogateescape; encoded back the same way any header compares
        # (a strict encode raised on non-ASCII bytes, and the client got HTTP 500).
        if scheme.lower() in ("api-key", "bearer") and hmac.compare_digest(value.encode("utf-8", "surrogateescape"),
                                                                           self._token.encode()):
            return None
        self._refusals.refused(connection.remote_address)
        return connection.respond(401, "this policy server needs its token: Authorization: Api-Key <token>\n")

    async def _connection(self, websocket: ServerConnection) -> None:
        peer = websocket.remote_address
        log.info("connection from %s opened", peer)
        self._batcher.connected(+1)
        try:
            await websocket.send(self._metadata)
            async for frame in websocket:
                self._last_message = time.monotonic()
                self._answering += 1
                try:
                    await websocket.send(self._packed(await self._guarded_answer(frame, peer)))
                finally:
                    self._answering -= 1
        except websockets.ConnectionClosed as closed:
            log.info("connection from %s closed: %s", peer, closed)
            return
        finally:
            self._batcher.connected(-1)
        log.info("connection from %s closed", peer)

    async def _guarded_answer(self, frame, peer) -> dict:
        """Every failure while answering is an error reply, never a closed connection (websockets' 1011)."""
        try:
            return await self._answer(frame, peer)
        except Exception as error:  # a request that slipped past the checks must not take the connection down
            log.exception("request from %s could not be answered", peer)
            return error_reply("invalid_request", "default", f"the request could not be answered "
                               f"({type(error).__name__}: {error})")

    @staticmethod
    def _packed(reply: dict) -> bytes:
        try:
            return wire.pack(reply)
        except Exception as error:  # e.g. an answer carrying a value the wire refuses
            return wire.pack(error_reply(reply.get("type", "invalid_request"), "default",
                                         f"the reply could not be encoded ({type(error).__name__}: {error})"))

    async def _answer(self, frame, peer) -> dict:
        started = time.perf_counter()
        if isinstance(frame, str):
            return error_reply("invalid_request", "default", "text frame received; send msgpack as a binary frame")
        try:
            message = wire.unpack(frame)
        except wire.WireError as error:
            return error_reply("invalid_request", "default", f"the frame is not msgpack the server can read: {error}")
        decoded = time.perf_counter()
        if not isinstance(message, dict):
            return error_reply("invalid_request", "default", f"a request is a map; got {type(message).__name__}")
        request_id, kind = reply_id(message), message.get("type", "infer")
        if not isinstance(kind, str):
            return error_reply("unknown", request_id, f"'type' must be text (ping or infer); got {type(kind).__name__}")
        if kind == "ping":
            return ok_reply("ping", request_id)
        if kind not in INFER_TYPES:
            return error_reply("unknown", request_id, f"unsupported message type {kind!r}; use ping or infer")
        try:
            examples = self.policy.check(message)
        except RequestError as error:
            log.warning("request %s from %s refused: %s", request_id, peer, error)
            return error_reply("inference_result", request_id, str(error))
        checked = time.perf_counter()
        try:
            data, timing = await self._batcher.submit(examples)
        except (QueueFull, ServerStopping, RequestTimedOut) as error:
            log.warning("request %s from %s not run: %s", request_id, peer, error)
            return error_reply("inference_result", request_id, str(error))
        except Exception as error:  # the model's own error goes back to the client; the server keeps serving
            log.error("request %s from %s failed in the model", request_id, peer, exc_info=error)
            return error_reply("inference_result", request_id, f"{type(error).__name__}: {error}")
        stage_ms = data.pop("stage_ms", None)  # --profile: the model's stages, one row per example
        if not all(np.isfinite(value).all() for value in data.values()):
            log.error("request %s from %s: the model returned non-finite actions", request_id, peer)
            return error_reply("inference_result", request_id, "the model returned NaN or infinite actions for this "
                               "request; check its image and state")
        log.info("request %s from %s: %d example(s) in %.1f ms (model %.1f ms, waited %.1f ms, forward of %d)",
                 request_id, peer, len(examples), (time.perf_counter() - started) * 1e3,
                 (timing.ended - timing.began) * 1e3, (timing.began - timing.queued) * 1e3, timing.forward_examples)
        if stage_ms is None:
            return ok_reply("inference_result", request_id, data=data)
        profile = reply_timing(stage_ms[0], decode_s=decoded - started, check_s=checked - decoded,
                               queue_wait_s=timing.began - timing.queued, total_s=time.perf_counter() - started,
                               sampling_steps=self.policy.sampling_steps, forward_examples=timing.forward_examples)
        return ok_reply("inference_result", request_id, data=data, timing=profile)


class RefusalLog:
    """Refused connections as warnings, at most one line per `interval_s` with the count since the last line: a
    client retrying without its token would otherwise fill the log (1,223 lines in one probe)."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._unlogged, self._last_line = 0, -float("inf")

    def refused(self, peer) -> None:
        self._unlogged += 1
        if time.monotonic() - self._last_line >= self.interval_s:
            self.flush(peer)

    def flush(self, peer=None) -> None:
        if not self._unlogged:
            return
        latest = f", the latest from {peer}" if peer is not None else ""
        log.warning("%d connection(s) refused: no or wrong token%s (logged at most every %.0f s)", self._unlogged,
                    latest, self.interval_s)
        self._unlogged, self._last_line = 0, time.monotonic()


@contextlib.contextmanager
def running_server(policy: Policy, host: str = "127.0.0.1", **options):
    """A PolicyServer on its own thread for the duration of the block; yields it (its .port is bound)."""
    server = PolicyServer(policy, host, port=options.pop("port", 0), **options)
    ready, failure = threading.Event(), []

    def target():
        try:
            asyncio.run(server.run(on_ready=lambda port: ready.set()))
        except BaseException as error:  # surfaced to the caller below, not lost in the thread
            failure.append(error)
            ready.set()

    thread = threading.Thread(target=target, name="policy-server", daemon=True)
    thread.start()
    ready.wait(timeout=60)
    if failure or not ready.is_set():
        raise RuntimeError(f"the policy server did not start: {failure[0] if failure else 'timed out'}")
    try:
        yield server
    finally:
        server.stop()
        thread.join(timeout=60)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.serving.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", "--ckpt_path", dest="ckpt", required=True,
                        help="RUN/checkpoints/steps_N_pytorch_model.pt or RUN/final_model/pytorch_model.pt")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: this machine only; 0.0.0.0: every interface, with a warning)")
    parser.add_argument("--token", default=os.environ.get(wire.TOKEN_ENV),
                        help=f"shared token a client must send as 'Authorization: Api-Key <token>' (default: ${wire.TOKEN_ENV}; "
                             f"unset: no token). Prefer setting ${wire.TOKEN_ENV}: a --token value is visible to every "
                             "user of this machine in /proc/PID/cmdline (ps)")
    parser.add_argument("--port", type=int, default=10093, help="0 picks a free port (logged at start)")
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES,
                        help="auto takes the first accelerator present, else the CPU")
    parser.add_argument("--bf16", "--use_bf16", dest="bf16", action="store_true", help="cast the model to bfloat16")
    parser.add_argument("--unnorm_key", default=None, help="statistics tag, when the run trained on several robots")
    parser.add_argument("--max_batch", type=int, default=64, help="most examples in one request")
    parser.add_argument("--max_forward_batch", type=int, default=MAX_FORWARD_BATCH,
                        help="most examples in one model forward, gathered from the requests waiting together "
                             f"(default {MAX_FORWARD_BATCH}; 1: one request at a time, as before batching)")
    parser.add_argument("--max_wait_ms", type=float, default=MAX_WAIT_MS,
                        help="how long the oldest waiting request may wait for the other open connections' requests "
                             f"to join its forward (default {MAX_WAIT_MS:g}; a lone client never waits; 0: only what "
                             "arrived while the model was busy is gathered)")
    parser.add_argument("--max_queue", type=int, default=MAX_QUEUE,
                        help="most requests waiting for the model; more get an error reply saying the server is busy")
    parser.add_argument("--base_model", default=os.environ.get(BASE_MODEL_ENV),
                        help="the local Cosmos snapshot, for a run folder made elsewhere whose recorded "
                             f"framework.cosmos25.base_model does not exist here (default: ${BASE_MODEL_ENV})")
    parser.add_argument("--max_message_mb", type=float, default=None,
                        help="larger frames close the connection with code 1009 (message too big); default: the "
                             "largest request --max_batch examples of the model's views and frames make")
    parser.add_argument("--idle_timeout", type=float, default=-1, help="stop after this many idle seconds; -1 never")
    parser.add_argument("--request_timeout_s", type=float, default=REQUEST_TIMEOUT_S,
                        help="a request not answered within this many seconds gets an error reply, and /healthz "
                             f"answers 503 while the model has not answered for longer (default {REQUEST_TIMEOUT_S:g}: "
                             "generous, a full-size forward on a CPU takes tens of seconds)")
    parser.add_argument("--owner_pid", type=int, default=None,
                        help="stop when the process with this id ends (a server started for one run: the closed-loop "
                             "side process passes the trainer's)")
    parser.add_argument("--sampling_steps", type=int, default=None,
                        help="Euler steps of the action head (default: the run's "
                             "framework.action_model.num_inference_timesteps; bench/bench_latency.py measures the "
                             "effect on actions and time)")
    parser.add_argument("--profile", action="store_true",
                        help="every reply carries `timing`: milliseconds per stage (decode, check, queue wait, "
                             "preprocess, prompt, VAE encode, feature pass, action sampling, unnormalise); the "
                             "device is synchronised between stages")
    return parser


def option_problem(args) -> str | None:
    """What is wrong with the command line's values, before anything loads."""
    for name in ("max_batch", "max_forward_batch", "max_queue"):
        if getattr(args, name) < 1:
            return f"--{name} {getattr(args, name)}: must be at least 1"
    if not 0 <= args.max_wait_ms <= 10_000:
        return f"--max_wait_ms {args.max_wait_ms:g}: must be 0 to 10000"
    low, high = MESSAGE_MB_RANGE
    if args.max_message_mb is not None and not low <= args.max_message_mb <= high:
        return (f"--max_message_mb {args.max_message_mb:g}: must be {low:g} to {high:g} MiB (leave it out for the "
                "largest request the model's bounds allow)")
    if args.idle_timeout != -1 and not 0 < args.idle_timeout <= MAX_IDLE_TIMEOUT_S:
        return (f"--idle_timeout {args.idle_timeout:g}: must be -1 (never) or more than 0 and at most "
                f"{MAX_IDLE_TIMEOUT_S:g} seconds")
    if not 0 < args.request_timeout_s <= MAX_REQUEST_TIMEOUT_S:
        return (f"--request_timeout_s {args.request_timeout_s:g}: must be more than 0 and at most "
                f"{MAX_REQUEST_TIMEOUT_S:g}")
    if args.owner_pid is not None and (args.owner_pid < 1 or not process_lifetime.alive(args.owner_pid)):
        return f"--owner_pid {args.owner_pid}: no such process (the owner must be running when the server starts)"
    if args.sampling_steps is not None and not 1 <= args.sampling_steps <= MAX_SAMPLING_STEPS:
        return f"--sampling_steps {args.sampling_steps}: must be 1 to {MAX_SAMPLING_STEPS}"
    if args.token is not None and not (args.token.isascii() and args.token.isprintable()):
        return (f"the token (--token or ${wire.TOKEN_ENV}) holds characters other than printable ASCII; it travels "
                "in an HTTP header, so pick one of letters, digits and punctuation")
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = option_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    configure_logging()
    return run_main(lambda: serve_policy(args))


def serve_policy(args: argparse.Namespace) -> None:
    from DiT4DiT.serving.device import select_device

    device = select_device(args.device)
    policy = Policy.load(args.ckpt, device, bf16=args.bf16, unnorm_key=args.unnorm_key, max_batch=args.max_batch,
                         base_model=args.base_model, sampling_steps=args.sampling_steps, profile=args.profile)
    log.info("model from %s on %s (statistics %s)", args.ckpt, device, policy.statistics_tag)
    limit = int(args.max_message_mb * (1 << 20)) if args.max_message_mb else None
    server = PolicyServer(policy, args.host, args.port, max_message_bytes=limit, idle_timeout=args.idle_timeout,
                          token=args.token, max_forward_batch=args.max_forward_batch, max_wait_ms=args.max_wait_ms,
                          max_queue=args.max_queue, request_timeout_s=args.request_timeout_s, owner_pid=args.owner_pid)

    async def serve_until_signal():
        await server.run(on_ready=lambda port: server.install_signal_handlers())

    asyncio.run(serve_until_signal())


def leave(code: int) -> None:
    """End the server process without finalising the interpreter. A forward still running on the model's daemon
    thread would otherwise be torn down inside torch's C++ frames, which aborts the process ("terminate called
    without an active exception", exit -6) after it has stopped cleanly."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
