"""bench/device_check.py --tiny runs every section on the CPU and writes its JSON and table (the full-size run is for
a lent GPU or NPU; see docs/device-check.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tiny_device_check_runs_every_section_on_cpu(tmp_path):
    out = tmp_path / "device_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--tiny", "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sections = json.loads(out.read_text())["sections"]
    assert {name: s["status"] for name, s in sections.items()} == {name: "ok" for name in (
        "environment", "build", "flops", "store", "steps", "plan", "checkpointing", "repeat", "zero2")}
    assert sections["plan"]["4"]["estimate_mib"] > 0 and sections["checkpointing"]["on"]["step_ms"] > 0
    assert sections["zero2"]["skipped"] == "1 device(s): the overlap_comm comparison needs 2"
    assert sections["repeat"]["over_2_22"] and sections["repeat"]["same_gradient"]
    # The analytic matmul count of a transformer forward is what torch's counter finds, within the small terms
    # it leaves out (time embedding, output modulation).
    assert 0.98 < sections["flops"]["counted_over_analytic_linear"] < 1.05
    for batch in ("1", "2", "4"):
        assert sections["steps"][batch]["step_ms"] > 0 and sections["steps"][batch]["tflops"] > 0
    assert "batch    step ms   TFLOPS     MFU  peak MiB" in result.stdout
