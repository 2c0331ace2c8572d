"""A stand-in for torch_npu's ParallelStore on the rendezvous port (torch_npu_run, TORCH_NPU_USE_PARALLEL_TCPSTORE):
a server whose protocol is not torch's TCPStore's. It reads what a client sends, answers bytes that TCPStore does
not expect, and closes; whether the real one does the same is unknown, which is why the heartbeat must cope.
"""

from __future__ import annotations

import socket
import threading


class FakeParallelStore:
    def __init__(self):
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            with client:
                client.settimeout(1)
                try:
                    client.recv(4096)
                    client.sendall(b"\xffPARALLEL-STORE\x00\x00\x00\x07")
                except OSError:
                    pass

    def __enter__(self) -> FakeParallelStore:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.close()
