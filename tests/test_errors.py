"""run_main, every entry point's error path: our errors are one line and their exit status, others stay bugs."""

from __future__ import annotations

import pytest

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.errors import DiT4DiTError, run_main
from DiT4DiT.training.preemption import Preempted


def _raise(error: Exception):
    def body():
        raise error
    return body


def test_our_error_is_one_line_with_its_exit_status(capsys):
    assert run_main(_raise(ConfigError("datasets.vla_data.image_size=40: use\n  a multiple of 16"))) == 2
    assert capsys.readouterr().err == "error: datasets.vla_data.image_size=40: use a multiple of 16\n"
    assert run_main(_raise(Preempted("SIGTERM", 12, "RUN/checkpoints/state")), "train") == 75
    assert capsys.readouterr().err.startswith("train: stopped by SIGTERM after step 12; training state saved in RUN/")


def test_the_prefix_may_depend_on_the_error_or_say_nothing(capsys):
    assert run_main(_raise(ConfigError("bad key")), lambda error: error.label) == 2
    assert capsys.readouterr().err == "config error: bad key\n"
    assert run_main(_raise(DiT4DiTError("said by rank 0")), lambda error: None) == 1
    assert capsys.readouterr().err == ""


def test_a_body_that_ends_gives_its_status():
    assert run_main(lambda: None) == 0
    assert run_main(lambda: 3) == 3


def test_anything_else_is_a_bug_and_keeps_its_traceback():
    with pytest.raises(KeyError, match="state"):
        run_main(_raise(KeyError("state")))
