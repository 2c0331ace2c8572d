"""The one error type of the data pipeline: bad data on disk that the user has to fix."""

from DiT4DiT.errors import DiT4DiTError


class DataError(DiT4DiTError, ValueError):
    """A dataset file, key, episode or frame that cannot be used; the message names it and says how to fix it."""
