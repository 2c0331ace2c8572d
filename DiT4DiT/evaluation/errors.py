"""Errors of the simulator evaluations; main() prints the message and exits with the code."""

from DiT4DiT.errors import DiT4DiTError


class BadArgument(DiT4DiTError):
    """A task name or setting that cannot work; the message names it and what to use instead."""

    exit_code = 2


class SimulatorError(DiT4DiTError):
    """The simulator or the policy server cannot be used as asked."""
