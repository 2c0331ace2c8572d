"""A fault in the policy server's model thread outside a forward: Batcher._next_batch raises once a request waits.

    python tests/helpers/faulty_server.py SERVER_OPTIONS...     # a server whose every _next_batch call raises

`failing_next_batch(times)` is the fault for in-process servers (monkeypatched onto Batcher._next_batch).
"""

from __future__ import annotations

import sys

from DiT4DiT.serving.batching import Batcher


def failing_next_batch(times: int | None = None):
    """Batcher._next_batch raising for the first `times` requests (None: for every one)."""
    next_batch, left = Batcher._next_batch, [times]

    def next_batch_or_fault(batcher):
        if left[0] is not None and left[0] <= 0:
            return next_batch(batcher)
        with batcher._changed:  # the thread's first call comes before any request: fail on a request
            while not batcher._waiting and not batcher._stopped:
                batcher._changed.wait()
            if batcher._stopped:
                return None
        if left[0] is not None:
            left[0] -= 1
        raise RuntimeError("injected fault while taking a batch")

    return next_batch_or_fault


if __name__ == "__main__":
    from DiT4DiT.serving import server

    Batcher._next_batch = failing_next_batch()
    server.leave(server.main(sys.argv[1:]))
