"""bench/bench_mixed_traffic.py runs end to end against a server process on a handful of clients and writes its rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_mixed_traffic_bench_reports_every_kind_and_no_broken_rule(tiny_ckpt, tmp_path):
    out = tmp_path / "mixed.json"
    result = subprocess.run([sys.executable, "bench/bench_mixed_traffic.py", "--ckpt", str(tiny_ckpt), "--seeds", "3",
                             "--clients", "4", "--requests", "5", "--json", str(out)], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    (row,) = figures["rows"]
    assert row["requests"] == 20 and sum(row["kinds"].values()) == 20 and row["problems"] == []
    assert row["healthz"] == 200 and figures["server_exit"] == 0
    assert "| 3 | 4 | 20 |" in result.stdout
