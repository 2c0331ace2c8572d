"""Every package module's direct tests can be found (scripts/tests_of_modules.py, docs/testing.md): in the test module
named after it, or where its table says; the modules still without direct tests are listed, and the lists stay
current (a module that gains a named test module leaves them)."""

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
