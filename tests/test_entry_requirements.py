"""No traceback before the first step: every entry point, run by a Python that lacks its packages (a bare venv),
says in one line which Python lacks what and how to install it, with exit status 2 and nothing started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.launcher_runs import LAUNCHER, ROOT, launcher_env

ENTRIES = [  # (command after the interpreter, what the line starts with, a package named missing)
    (["-m", "DiT4DiT.launch", "--help"], "scripts/train_8p.sh:", "omegaconf"),
    (["-m", "DiT4DiT.doctor"], "python -m DiT4DiT.doctor:", "omegaconf"),
    (["-m", "DiT4DiT.tools.modality", "x", "--data_config", "auto"], "python -m DiT4DiT.tools.modality:", "pyarrow"),
    (["-m", "DiT4DiT.tools.export_checkpoint", "x.pt", "--out", "y.pt"], "python -m DiT4DiT.tools.export_checkpoint:", "torch"),
    (["-m", "DiT4DiT.tools.tiny_cosmos"], "python -m DiT4DiT.tools.tiny_cosmos:", "torch"),
    (["-m", "DiT4DiT.tools.tiny_dataset", "--data_mix", "robotwin", "--out", "x"], "python -m DiT4DiT.tools.tiny_dataset:", "pandas"),
    (["-m", "DiT4DiT.tools.tiny_robotwin"], "python -m DiT4DiT.tools.tiny_robotwin:", "numpy"),
    # what `accelerate launch` runs; no PYTHONPATH here, so the script finds its own checkout's package
    (["DiT4DiT/training/train.py", "--config_yaml", "x.yaml"], "DiT4DiT/training/train.py:", "torch"),
]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """The system's Python 3 in a venv of its own: the standard library and nothing else (no pip either)."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    probe = subprocess.run([python, "-c", "import omegaconf"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this Python's venv still sees omegaconf")
    return python


def assert_one_line(result: subprocess.CompletedProcess, start: str, missing: str, python: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    line = lines[0]
    assert line.startswith(f"{start} {python} (Python 3."), line
    assert "lacks " in line and missing in line and "make venv" in line and "pip install -r requirements-npu.txt" in line


@pytest.mark.parametrize("args, start, missing", ENTRIES, ids=[" ".join(e[0][1:3]) for e in ENTRIES])
def test_an_entry_point_names_the_python_and_what_it_lacks(bare_python, args, start, missing, tmp_path):
    result = subprocess.run([bare_python, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert_one_line(result, start, missing, bare_python)
    assert not any(tmp_path.iterdir())


def test_the_launchers_help_with_a_python_without_the_requirements(bare_python):
    result = subprocess.run(["bash", str(LAUNCHER), "--help"], cwd=ROOT, env=launcher_env(env={"PYTHON": bare_python}),
                            capture_output=True, text=True, timeout=120)
    assert_one_line(result, "scripts/train_8p.sh:", "omegaconf", bare_python)
    assert "PYTHON=" in result.stderr and result.stdout == ""
