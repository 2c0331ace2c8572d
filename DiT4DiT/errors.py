"""The one base of every error a user has to act on; its exit status tells a scheduler what happened.

Every layer raises a subclass with a one-line message that names the file, key or value and the fix; every
entry point runs through `run_main`, which catches this base once and exits with `exit_code`. Stdlib only, so
any module can import it cheaply.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class DiT4DiTError(Exception):
    """An error with a message meant for the user and the process exit status that goes with it."""

    exit_code = 1
    # True where every rank raises it together from the same shared answer (a config value, the run dir):
    # the main process alone says it. Otherwise each rank that raises it says it, tagged with its rank.
    same_on_every_rank = False

    @property
    def label(self) -> str:
        """What the one line starts with."""
        return type(self).__name__


class UsageError(DiT4DiTError):
    """A bad command line: the message names the option and what it expects."""

    exit_code = 2


class TrainingError(DiT4DiTError, RuntimeError):
    """Training cannot go on (non-finite loss, unusable resume state); the message says what to do."""


def run_main(body: Callable[[], int | None], prefix: str | Callable[[DiT4DiTError], str | None] = "error") -> int:
    """Every entry point's one error path: runs `body`; a DiT4DiTError becomes one line on stderr and its exit
    status, anything else is a bug and keeps its traceback.

    `prefix` starts the line ("error: ..."); a function of the error gives it instead, or None where this process
    leaves the saying to another (a rank other than the main one).
    """
    try:
        status = body()
    except DiT4DiTError as error:
        start = prefix(error) if callable(prefix) else prefix
        if start is not None:
            print(f"{start}: {' '.join(str(error).split())}", file=sys.stderr)
        return error.exit_code
    return 0 if status is None else status
