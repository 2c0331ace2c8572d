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
FAKES = ROOT / "tests" / "fakes"
# Builds the tiny model and runs the patcher section alone (the whole check is the test above).
PATCHER_DRIVER = """
import json, sys, tempfile
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
import device_check
torch.set_num_threads(1)
state = {}
with tempfile.TemporaryDirectory() as tmp:
    device_check.build(state, False, torch.device("cpu"), Path(tmp))
    print(json.dumps(device_check.patcher(state, torch.device("cpu"), 1)))
"""


@pytest.mark.slow
def test_tiny_device_check_runs_every_section_on_cpu(tmp_path):
    out = tmp_path / "device_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--tiny", "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sections = json.loads(out.read_text())["sections"]
    assert {name: s["status"] for name, s in sections.items()} == {name: "ok" for name in (
        "environment", "build", "flops", "store", "steps", "plan", "checkpointing", "deterministic", "patcher",
        "latency", "repeat", "rope", "checksum", "zero2", "profile", "env_ab")}
    assert sections["plan"]["4"]["estimate_mib"] > 0 and sections["checkpointing"]["on"]["step_ms"] > 0
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
    # Ascend honours only a thread's first determinism setting: each setting in its own process.
    assert sections["deterministic"]["fresh_process"] is True and sections["checksum"]["fresh_process"] is True
    # No mx_driving in this environment: nothing to time, and the table says why.
    assert sections["patcher"]["skipped"].startswith("mx_driving is not installed here: no patcher to time")
    assert "mx_driving patcher on/off: skipped: mx_driving is not installed here" in result.stdout
    assert sections["repeat"]["over_2_22"] and sections["repeat"]["same_gradient"]
    latency = sections["latency"]["stages_ms"]
    assert all(latency[kind][stage] > 0 for kind in ("plain", "rtc") for stage in ("vae_encode", "action_sampling"))
    assert "request at batch 1 (4 sampling steps), ms: preprocess" in result.stdout
    # The trainer's profiler over 3 steps: its table kept; each MindSpeed-MM variable timed unset against all set.
    assert sections["profile"]["api"] == "torch.profiler" and sections["profile"]["rows"][0]["calls"] > 0
    assert set(sections["env_ab"]["rows"]) == {"OMP_NUM_THREADS", "COMBINED_ENABLE", "ACLNN_CACHE_LIMIT"}
    assert all(row["unset_over_set"] > 0 for row in sections["env_ab"]["rows"].values())
    assert "profiler (torch.profiler), 3 steps, top operators by self time: " in result.stdout
    # The analytic matmul count of a transformer forward is what torch's counter finds, within the small terms
    # it leaves out (time embedding, output modulation).
    assert 0.98 < sections["flops"]["counted_over_analytic_linear"] < 1.05
    # MFU divides by the analytic count of the whole step (every part of the model as configured); on the CPU torch's
    # counter sees the same matmuls and convolutions, within the attention kernels it misses.
    analytic = sections["flops"]["step_analytic_per_sample"]
    assert {"transformer feature pass", "transformer video pass", "VAE encode", "action head"} <= set(analytic)
    assert 0.95 < sections["flops"]["step_counted_over_analytic"] < 1.02
    assert sections["steps"]["mfu_flops"] == "analytic"
    assert sections["steps"]["1"]["tflops"] == pytest.approx(analytic["total"] / sections["steps"]["1"]["step_ms"] / 1e9,
                                                             rel=1e-3)
    assert "analytic (MFU's)" in result.stdout and "counted by FlopCounterMode" in result.stdout
    for batch in ("1", "2", "4"):
        assert sections["steps"][batch]["step_ms"] > 0 and sections["steps"][batch]["tflops"] > 0
    assert "batch    step ms   TFLOPS     MFU  peak MiB" in result.stdout
    assert "same weights summed 20 times: float32, deterministic off: identical" in result.stdout


def test_section_limits_fit_the_ten_minutes():
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "bench" / "device_check.py")
    device_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(device_check)
    assert device_check.TOTAL_BUDGET_S == 600
    assert sum(device_check.SECTION_LIMIT_S.values()) <= device_check.TOTAL_BUDGET_S



def run_patcher_section(tmp_path: Path, fake: str, env: dict) -> dict:
    """The patcher section on the tiny model in a child with the fake torch_npu and `fake` mx_driving: its result."""
    driver = tmp_path / "driver.py"
    driver.write_text(PATCHER_DRIVER)
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith(("DIT4DIT_", "FAKE_"))}, **env,
                   "PYTHONPATH": os.pathsep.join(map(str, [FAKES / "torch_npu", FAKES / fake, ROOT])),
                   "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(driver), str(ROOT / "bench")], capture_output=True, text=True,
                            env=environment, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("fake, env, applied", [
    ("mx_driving_v2", {}, "(default; mx-driving version unknown, API 2.0): applied numpy_compat, tensor_index, "
                          "batch_matmul"),
    ("mx_driving_v1", {"DIT4DIT_MX_PATCHER": "default"},
     "(default; mx-driving version unknown, API 1.0): applied numpy_type, index, batch_matmul"),
    ("mx_driving_v1", {"DIT4DIT_MX_PATCHER": "off"}, "(default; mx-driving version unknown, API 1.0): applied "
                                                     "numpy_type, index, batch_matmul"),
    ("mx_driving_v2", {"DIT4DIT_MX_PATCHER": "lean"}, "(lean; mx-driving version unknown, API 2.0): applied "
                                                      "numpy_compat; left out tensor_index, batch_matmul"),
])
def test_patcher_section_times_steps_with_the_patcher_off_then_on(tmp_path, fake, env, applied):
    """With a (fake) mx_driving the section times batch-1 steps through the patched trainer's own helper, off and
    then in the mode a run would enter (off in the environment still times default against off)."""
    section = run_patcher_section(tmp_path, fake, env)
    assert section["lines"]["off"] == "mx_driving patcher: off (DIT4DIT_MX_PATCHER=off or DIT4DIT_DISABLE_MX_PATCHER=1)"
    assert section["lines"]["on"].startswith(f"mx_driving patcher {applied}")
    assert section["step_ms"]["off"] > 0 and section["step_ms"]["on"] > 0 and section["on_over_off"] > 0
    assert section["steps_measured"] == 1


@pytest.mark.slow
def test_patcher_section_that_cannot_apply_says_why_and_keeps_the_off_time(tmp_path):
    section = run_patcher_section(tmp_path, "mx_driving_v2", {"FAKE_MX_DRIVING_APPLY_ERROR": "1"})
    assert section["skipped"] == ("the mx_driving patcher (default) failed to apply (RuntimeError('fake patch "
                                  "failure')); training without it")
    assert section["step_ms"]["off"] > 0 and "on" not in section["step_ms"]
