"""The client side of a closed loop: one request to our policy server per action chunk, its rows one per step.

The simulators' adapters (metaworld, libero) subclass ChunkedPolicy and turn a row of the dataset's action layout
into their env's action. Each request carries a noise seed made from the episode and the step (request_seed), so a
served policy's episodes do not depend on how many environment processes share the server or how it batches.
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


def request_seed(episode: tuple[int, ...], step: int) -> int:
    """The example seed of the request an episode makes at policy step `step` (0, chunk, 2 chunk, ...): the first
    64-bit word of numpy's SeedSequence([*episode, step]) with its top bit dropped (the server takes 0..2^63-1).
    `episode` names the episode by non-negative integers: (seed,) on Meta-World, (seed, task id, trial) on LIBERO."""
    word = np.random.SeedSequence([*episode, step]).generate_state(1, np.uint64)[0]
    return int(word >> np.uint64(1))


class ChunkedPolicy:
    """Asks the server for an action chunk every `action_chunk` steps; next_row() returns the chunk's rows in order.

    blank_images=True sends black frames: what the model makes of the state alone. reset(episode) starts an
    episode; its requests carry request_seed(episode, step) as the example's "seed" (an extra example key, which the
    original's server ignores: there the noise stays fresh).
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
        self._episode: tuple[int, ...] = ()

    def reset(self, episode: tuple[int, ...]) -> None:
        self._actions, self._step, self._episode = None, 0, tuple(int(part) for part in episode)

    def next_row(self, views, state, instruction: str) -> np.ndarray:
        """This step's row of the served chunk (the dataset's action units), asking for a new chunk when one ends."""
        if self._step % self.chunk == 0:
            if self.blank_images:
                views = [np.zeros_like(view) for view in views]
            example = {**camera_fields(views, self.metadata), "lang": instruction,
                       "seed": request_seed(self._episode, self._step)}
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
