"""The error every config-derived failure raises (its own module so that any layer can import it cheaply)."""


class ConfigError(ValueError):
    """A config file, key or value the user has to fix; the message says how (one line, exit status 2)."""
