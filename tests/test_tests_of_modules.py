"""Every package module's direct tests can be found (scripts/tests_of_modules.py, docs/testing.md): in the test module
named after it, or where its table says; the modules still without direct tests (none now) are listed, and the lists
stay current (a module that gains a named test module leaves them)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tests_of_modules.py"
spec = importlib.util.spec_from_file_location("tests_of_modules", SCRIPT)
tests_of_modules = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests_of_modules)


def test_every_package_module_has_a_home_for_its_tests():
    assert tests_of_modules.problems() == []


@pytest.mark.parametrize("module, expected", [
    ("DiT4DiT.training.trainer", "test_trainer"),  # test_<name>
    ("DiT4DiT.memory.estimate", "test_memory_estimate"),  # test_<package>_<name>
    ("DiT4DiT.dataloader.writer", "test_data_writer"),  # the data package's short prefix
    ("DiT4DiT.errors", "test_errors"),  # a root module
    ("DiT4DiT.config.errors", None),  # shares its name with the root module: only test_config_errors would do
])
def test_the_rule_names_the_test_module(module, expected):
    assert tests_of_modules.named_test(module) == expected


def test_the_map_prints_one_line_per_module():
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True)
    rows = {line.split()[0]: line.split(maxsplit=1)[1] for line in result.stdout.splitlines()}
    assert len(rows) == len(tests_of_modules.package_modules())
    assert rows["training.trainer"] == "tests/test_trainer.py"
    assert rows["launch.values"] == "tests/test_launch_values.py"
    assert "(no direct tests yet)" not in rows.values()  # UNTESTED is empty


def test_a_module_without_direct_tests_must_be_listed_and_leaves_the_list_once_it_has_them(monkeypatch, capsys):
    elsewhere = {k: v for k, v in tests_of_modules.ELSEWHERE.items() if k != "DiT4DiT.evaluation.summary"}
    monkeypatch.setattr(tests_of_modules, "ELSEWHERE", elsewhere)  # as if test_evaluation.py had never tested it
    assert tests_of_modules.problems() == ["DiT4DiT.evaluation.summary: no tests/test_<name>.py; write one, or list "
                                           "it in ELSEWHERE (where its tests are)"]
    monkeypatch.setattr(tests_of_modules, "UNTESTED", {"DiT4DiT.evaluation.summary"})
    assert tests_of_modules.problems() == [] and tests_of_modules.main() == 0
    assert "evaluation.summary".ljust(48) + " (no direct tests yet)" in capsys.readouterr().out.splitlines()
    monkeypatch.setattr(tests_of_modules, "UNTESTED", {"DiT4DiT.evaluation.summary", "DiT4DiT.launch.values",
                                                       "DiT4DiT.evaluation.libero", "DiT4DiT.gone"})
    assert tests_of_modules.problems() == [
        "DiT4DiT.evaluation.libero: in both ELSEWHERE and UNTESTED",
        "DiT4DiT.launch.values: tests/test_launch_values.py is named after it; drop it from UNTESTED",
        "DiT4DiT.gone: listed but not a module of DiT4DiT/"]
    assert tests_of_modules.main() == 1
    assert "problem: DiT4DiT.gone: listed but not a module of DiT4DiT/" in capsys.readouterr().err
