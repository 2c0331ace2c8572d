"""Client of the policy server (the original's protocol): connect, read metadata, send requests, get replies."""

from __future__ import annotations

import itertools
import logging
import os
import time

from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from DiT4DiT.serving import wire

log = logging.getLogger(__name__)


class ServerError(RuntimeError):
    """The server answered with an error (its message included) or a traceback."""


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
