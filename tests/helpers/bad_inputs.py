"""Bad inputs as table rows: what is given, the exit status expected, and the words its one error line must hold.

A row is one `BadInput`; `check_bad_input` runs the real trainer entry (`train.main`, in-process) on the tiny
config with the row's overrides and checks the contract of every bad input: the exit status, exactly one error
line on stderr holding every expected word, no traceback, and nothing written outside what the row prepared.
"""

from __future__ import annotations

import re

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from accelerate.state import AcceleratorState, GradientState

from DiT4DiT.training.train import main

TINY_CONFIG = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")
PROGRESS_BAR = re.compile(r"\d+%\|.*\| \d+/\d+ \[")  # tqdm's, e.g. diffusers loading the pipeline


@dataclass(frozen=True)
class BadInput:
    name: str
    args: tuple[str, ...]  # command-line arguments; "{tmp}" stands for the test's temporary folder
    exit_status: int
    words: tuple[str, ...]  # each must appear in the one error line
    prepare: Callable[[Path], None] | None = None  # writes what the row needs under the temporary folder

    def __str__(self) -> str:  # the pytest id
        return self.name


def _files(root: Path) -> set[Path]:
    return {path for path in root.rglob("*")}


def error_lines(err: str) -> list[str]:
    """stderr without log records (and their indented continuation lines) and progress bars: the error lines."""
    return [line for line in err.splitlines() if line.strip() and not LOG_RECORD.match(line) and not line[0].isspace()
            and not PROGRESS_BAR.search(line)]


def check_bad_input(case: BadInput, tmp_path: Path, capsys, base_model: Path | None = None,
                    data_root: Path | None = None) -> str:
    """Runs the row; returns its error line. Without `base_model`/`data_root`, empty folders stand in (enough for
    every error found before the data and the model are read)."""
    for name, given in (("model", base_model), ("data", data_root)):
        if given is None:
            (tmp_path / name).mkdir(exist_ok=True)
    if case.prepare is not None:
        case.prepare(tmp_path)
    before = _files(tmp_path)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    capsys.readouterr()
    code = main(["--config_yaml", TINY_CONFIG, f"--framework.cosmos25.base_model={base_model or tmp_path / 'model'}",
                 f"--datasets.vla_data.data_root_dir={data_root or tmp_path / 'data'}", f"--run_root_dir={tmp_path / 'runs'}",
                 "--trackers=[jsonl]", "--datasets.vla_data.num_workers=0",
                 *(arg.replace("{tmp}", str(tmp_path)) for arg in case.args)])
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert code == case.exit_status, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1, f"expected one error line, got {lines}"
    missing = [word for word in case.words if word not in lines[0]]
    assert not missing, f"{missing} not in: {lines[0]}"
    written = _files(tmp_path) - before
    assert not written, f"written although the input was refused: {sorted(map(str, written))[:5]}"
    return lines[0]
