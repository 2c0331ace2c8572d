"""The entry points' logging set-up: ours alone in a process we started, beside the host's handlers otherwise."""

from __future__ import annotations

import io
import logging
import sys
import types

import pytest

from DiT4DiT import logging_setup
from DiT4DiT.logging_setup import StderrHandler, configure_logging

log = logging.getLogger("dit4dit.test_logging_setup")


@pytest.fixture
def root_logging():
    """The root logger's handlers and level as they were, whatever the test did to them."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_called_by_a_host_program_the_hosts_handlers_stay(root_logging, caplog, capsys):
    hosts = [h for h in root_logging.handlers if not isinstance(h, StderrHandler)]  # pytest's (an earlier main() may have left ours)
    configure_logging()
    configure_logging()  # main() run twice in one host: still one handler of ours
    log.info("evaluated 3 episodes")
    assert [h for h in root_logging.handlers if not isinstance(h, StderrHandler)] == hosts
    assert len([h for h in root_logging.handlers if isinstance(h, StderrHandler)]) == 1
    assert [r.getMessage() for r in caplog.records] == ["evaluated 3 episodes"]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" INFO dit4dit.test_logging_setup: evaluated 3 episodes")


def test_started_as_our_program_the_set_up_is_ours_alone(root_logging, monkeypatch, capsys):
    foreign = logging.StreamHandler(sys.stdout)  # as an import's basicConfig leaves it
    root_logging.addHandler(foreign)
    program = types.ModuleType("__main__")
    program.__file__ = logging_setup.__file__.replace("logging_setup.py", "serving/server.py")
    monkeypatch.setitem(sys.modules, "__main__", program)
    configure_logging()
    assert [type(h) for h in root_logging.handlers] == [StderrHandler]
    log.warning("listening on 0.0.0.0:8000")
    out, err = capsys.readouterr()
    assert out == "" and err.endswith(" WARNING dit4dit.test_logging_setup: listening on 0.0.0.0:8000\n")


def test_pytest_itself_is_not_our_program():
    assert not logging_setup.started_as_our_program()


def test_the_handler_writes_to_the_stderr_of_the_moment(monkeypatch):
    """A handler holding the stream of its creation would write into a test's closed capture after the test."""
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "to the new stderr", None, None))
    assert later.getvalue() == "to the new stderr\n"
