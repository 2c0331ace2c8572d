"""The client side of a closed loop: one request to our policy server per action chunk, its rows one per step.

The simulators' adapters (metaworld, libero) subclass ChunkedPolicy and turn a row of the dataset's action layout
into their env's action.
"""

from __future__ import annotations

import time

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
    from DiT4DiT.serving.client import PolicyClient

    host, port = server_address(server)
    try:
        return PolicyClient(host, port, wait_s=wait_s, retry_s=min(1.0, wait_s))
    except (TimeoutError, OSError) as error:
        reason = str(error) if isinstance(error, TimeoutError) else f"cannot reach the policy server at {server} ({error})"
        raise SimulatorError(f"{reason}; start one with "
                             "`python -m DiT4DiT.serving.server --ckpt RUN/checkpoints/steps_N_pytorch_model.pt`") from None


class ChunkedPolicy:
    """Asks the server for an action chunk every `action_chunk` steps; next_row() returns the chunk's rows in order.

    blank_images=True sends black frames: what the model makes of the state alone.
    """

    sees = True  # it looks at the views, so the adapter must render them

    def __init__(self, client, blank_images: bool = False):
        meta = self.metadata = client.metadata
        self.client = client
        self.action_dim = int(meta["action_dim"])
        self.chunk = int(meta["action_chunk"])
        self.encode_state = StateEncoder(meta) if int(meta["state_dim"]) else None
        self.blank_images = blank_images
        self.latencies_s: list[float] = []  # one per request
        self._actions: np.ndarray | None = None
        self._step = 0

    def reset(self) -> None:
        self._actions, self._step = None, 0

    def next_row(self, views, state, instruction: str) -> np.ndarray:
        """This step's row of the served chunk (the dataset's action units), asking for a new chunk when one ends."""
        if self._step % self.chunk == 0:
            if self.blank_images:
                views = [np.zeros_like(view) for view in views]
            example = {**camera_fields(views, self.metadata), "lang": instruction}
            if self.encode_state is not None:
                example["state"] = self.encode_state(state)
            started = time.perf_counter()
            try:
                self._actions = np.asarray(self.client.infer([example])["actions"][0])
            except Exception as error:  # a server error or a dropped connection ends the evaluation
                raise SimulatorError(f"the policy server failed on a request: {error}") from None
            self.latencies_s.append(time.perf_counter() - started)
        row = self._actions[self._step % self.chunk]
        self._step += 1
        return row
