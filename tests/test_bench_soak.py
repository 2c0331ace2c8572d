"""bench/bench_soak.py runs end to end on a handful of steps and requests and writes its figures as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_soak_bench_reports_rss_slopes_and_open_descriptors(tmp_path, tiny_pipeline_dir, tiny_robotwin_root):
    out = tmp_path / "soak.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "bench/bench_soak.py", "--steps", "12", "--requests", "20", "--json", str(out),
                             "--base_model", str(tiny_pipeline_dir), "--data_root_dir", str(tiny_robotwin_root)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["training"]["steps"] == 12 and figures["serving"]["requests"] == 20
    for phase in ("training", "serving"):
        assert figures[phase]["rss_last_mib"] > 100, figures  # a live torch process, not a process already gone
        assert figures[phase]["open_fds_end"] >= 3, figures
        assert figures[phase]["rss_slope_mib_per_1000"] == figures[phase]["rss_slope_mib_per_1000"], figures  # not NaN
    assert "| training | 12 |" in result.stdout and "| serving | 20 |" in result.stdout
