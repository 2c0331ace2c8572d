"""bench/device_check.py --tiny runs every section on the CPU and writes its JSON and table (the full-size run is for
a lent GPU or NPU; see docs/device-check.md)."""

from __future__ import annotations

import importlib.util
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
        "environment", "build", "flops", "store", "steps", "deterministic", "repeat", "rope", "checksum", "zero2")}
    assert sections["zero2"]["skipped"] == "1 device(s): the overlap_comm comparison needs 2"
    # the ranks would start in the launcher's environment for this host (CPU: its defaults)
    assert sections["zero2"]["environment"]["WANDB_MODE"] == "offline"
    assert sections["zero2"]["environment"]["TORCH_WARM_POOL"] == "0"
    # No fused kernel on the CPU: the section says so and compares our processor's path (diffusers' own function).
    assert sections["rope"]["ours"].startswith("diffusers' apply_rotary_emb: our processor's own path off NPU")
    assert sections["rope"]["max_abs_error_forward"] == 0.0 and sections["rope"]["max_abs_error_grad"] == 0.0
    assert set(sections["checksum"]["sums"]) == {f"float{bits}, deterministic {mode}" for bits in (32, 64)
                                                 for mode in ("off", "on")}
    assert all(r["identical"] for r in sections["checksum"]["sums"].values())  # CPU sums are deterministic
    assert sections["deterministic"]["step_ms"]["on"] > 0 and sections["deterministic"]["step_ms"]["off"] > 0
    assert sections["repeat"]["over_2_22"] and sections["repeat"]["same_gradient"]
    # The analytic matmul count of a transformer forward is what torch's counter finds, within the small terms
    # it leaves out (time embedding, output modulation).
    assert 0.98 < sections["flops"]["counted_over_analytic_linear"] < 1.05
    for batch in ("1", "2", "4"):
        assert sections["steps"][batch]["step_ms"] > 0 and sections["steps"][batch]["tflops"] > 0
    assert "batch    step ms   TFLOPS     MFU  peak MiB" in result.stdout
    assert "same weights summed 20 times: float32, deterministic off: identical" in result.stdout


def test_section_limits_fit_the_eight_minutes():
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "bench" / "device_check.py")
    device_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(device_check)
    assert device_check.TOTAL_BUDGET_S == 480
    assert sum(device_check.SECTION_LIMIT_S.values()) <= device_check.TOTAL_BUDGET_S
