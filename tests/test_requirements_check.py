"""requirements_check: an entry point whose packages are missing says so in one line and exits 2."""

from __future__ import annotations

import sys

import pytest

from DiT4DiT.requirements_check import CONFIG, EXIT_MISSING, lacking, require


def test_what_this_python_lacks_is_named_by_its_pip_name():
    assert lacking(CONFIG) == []
    assert lacking({"yaml": "pyyaml", "no_such_module_here": "no-such-package"}) == ["no-such-package"]


def test_a_missing_package_is_one_line_with_the_install_command_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        require("train.py", {"no_such_module_here": "no-such-package"})
    assert stop.value.code == EXIT_MISSING == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"train.py: {sys.executable} (Python ") and "lacks no-such-package; install with" in line
    assert "make venv" in line


def test_the_launcher_is_told_about_PYTHON(capsys):
    with pytest.raises(SystemExit):
        require("train_8p.sh", {"no_such_module_here": "no-such-package"}, launcher=True)
    assert "or set PYTHON=/path/to/python that has them" in capsys.readouterr().err


def test_nothing_is_said_when_everything_is_there(capsys):
    require("train.py", CONFIG)
    assert capsys.readouterr().err == ""
