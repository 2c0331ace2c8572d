"""The one base of every error a user has to act on; its exit status tells a scheduler what happened.

Every layer raises a subclass with a one-line message that names the file, key or value and the fix;
`main()` catches this base once and exits with `exit_code`. Stdlib only, so any module can import it cheaply.
"""


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


class TrainingError(DiT4DiTError, RuntimeError):
    """Training cannot go on (non-finite loss, unusable resume state); the message says what to do."""
