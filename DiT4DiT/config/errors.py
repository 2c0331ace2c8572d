"""The error every config-derived failure raises (its own module so that any layer can import it cheaply)."""

from DiT4DiT.errors import DiT4DiTError


class ConfigError(DiT4DiTError, ValueError):
    """A config file, key or value the user has to fix; the message says how (one line, exit status 2)."""

    exit_code = 2
    same_on_every_rank = True
    label = "config error"
