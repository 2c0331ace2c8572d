"""python -m DiT4DiT.doctor.memory_table on a --base_model it cannot count: one line naming the folder."""

from __future__ import annotations

import os

from DiT4DiT.doctor.memory_table import main
from helpers.in_process import call_main


def test_an_empty_base_model_is_one_line_not_a_table(tmp_path):
    # An empty folder ended in a traceback (no weights to count, the plan None) after printing nothing useful.
    result = call_main(main, ["--base_model", str(tmp_path)], dict(os.environ))
    assert result.returncode == 2 and not result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"python -m DiT4DiT.doctor.memory_table: --base_model {tmp_path}: ")
    assert "is not a diffusers pipeline folder" in line and "model_index.json is missing" in line
