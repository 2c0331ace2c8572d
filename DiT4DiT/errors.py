"""The one base of every error a user has to act on; its exit status tells a scheduler what happened.

Every layer raises a subclass with a one-line message that names the file, key or value and the fix;
`main()` catches this base once and exits with `exit_code`. Stdlib only, so any module can import it cheaply.
"""


class DiT4DiTError(Exception):
    """An error with a message meant for the user and the process exit status that goes with it."""

    exit_code = 1
