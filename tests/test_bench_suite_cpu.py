"""bench/suite_cpu.py: the plugin's records of a real pytest run, summed per group."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.suite_cpu import main
from helpers.in_process import ROOT

INNER = '''
import pytest, time

def test_spins():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass

@pytest.mark.xdist_group("sleepers")
def test_sleeps():
    time.sleep(0.3)
'''


def test_records_cpu_and_wall_per_test_and_sums_them_per_group(tmp_path, capsys):
    (tmp_path / "test_inner.py").write_text(INNER)
    out = tmp_path / "cpu.jsonl"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "bench.suite_cpu", "-p", "no:cacheprovider",
                             str(tmp_path / "test_inner.py")], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "SUITE_CPU_OUT": str(out), "PYTHONPATH": str(ROOT)}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    records = {r["test"].split("::")[1]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["test_spins"]["cpu_s"] >= 0.25 and records["test_spins"]["group"] == "test_inner.py"
    assert records["test_sleeps"]["wall_s"] >= 0.25 > records["test_sleeps"]["cpu_s"]
    assert records["test_sleeps"]["group"] == "sleepers"
    assert main([str(out), "--top", "5"]) == 0
    summary = capsys.readouterr().out
    assert summary.startswith("2 tests: ") and "  sleepers\n" in summary and "  test_inner.py\n" in summary
