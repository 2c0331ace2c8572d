"""Logging set-up for every entry point (trainer, server, evaluations, tools): records at INFO and above to stderr.

Started as one of our programs (`python -m DiT4DiT...` or `python DiT4DiT/...py`, under accelerate too), the
process's logging is ours: handlers that imports installed (mx_driving calls basicConfig) are replaced. Called
from another program (pytest, a notebook, a user's script calling our `main()`), that program's handlers stay
(pytest's caplog and report capture among them) and ours is added beside them, once however often `main()` runs.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PACKAGE = Path(__file__).resolve().parent


class StderrHandler(logging.StreamHandler):
    """Writes to the sys.stderr of the moment: a capture that replaced it, or that capture's successor."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ and setStream assign it; the property decides
        pass


def started_as_our_program() -> bool:
    """Whether the running program (the __main__ module) is a file of this package."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is not None and PACKAGE in Path(main_file).resolve().parents


def configure_logging(level: int = logging.INFO, fmt: str = FORMAT, filters: tuple[logging.Filter, ...] = ()) -> None:
    """Log records of `level` and above to stderr in `fmt`, through `filters`."""
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter(fmt))
    for record_filter in filters:
        handler.addFilter(record_filter)
    if started_as_our_program():
        logging.basicConfig(level=level, handlers=[handler], force=True)
        return
    root = logging.getLogger()
    for earlier in [h for h in root.handlers if isinstance(h, StderrHandler)]:
        root.removeHandler(earlier)
    root.addHandler(handler)
    root.setLevel(level)
