"""What tests of a command-line tool run as a subprocess share: its `error:` lines, a port nobody listens on."""

from __future__ import annotations

import socket
import subprocess


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
