"""The serving device seam: torch_npu loaded as the NPU patch loads it (checked with the fake), and no other
serving or evaluation module naming a device type."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE_TORCH_NPU = ROOT / "tests" / "fakes" / "torch_npu"

PROBE = """
import sys
from DiT4DiT.serving.device import DeviceError, select_device
try:
    print("auto", select_device("auto"))
except DeviceError as error:
    print("auto refused:", error)
print("transfer_to_npu imported", "torch_npu.contrib.transfer_to_npu" in sys.modules)
try:
    select_device("npu")
except DeviceError as error:
    print("npu refused:", error)
"""


def probe(*path: Path, broken: str = "") -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, path), str(ROOT)]), CUDA_VISIBLE_DEVICES="",
               FAKE_TORCH_NPU_BROKEN=broken)
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_with_torch_npu_present_it_is_imported_with_transfer_to_npu_and_a_missing_device_is_named():
    out = probe(FAKE_TORCH_NPU)
    assert "transfer_to_npu imported True" in out
    assert "auto cpu" in out  # the fake has no device: auto falls back
    assert "npu refused: --device npu: torch_npu sees no NPU device" in out


@pytest.mark.slow
def test_without_torch_npu_auto_serves_on_the_cpu_and_npu_is_refused():
    out = probe()
    assert "auto cpu" in out and "transfer_to_npu imported False" in out
    assert "npu refused: --device npu: torch_npu is not installed" in out


@pytest.mark.slow
@pytest.mark.parametrize("broken, module, cause", [
    ("import", "torch_npu", "ImportError('libascendcl.so: cannot open shared object file"),
    ("transfer_to_npu", "torch_npu.contrib.transfer_to_npu", "ModuleNotFoundError(\"No module named 'setuptools'\")"),
])
def test_an_installed_torch_npu_that_fails_to_load_is_refused_not_a_cpu_fallback(broken, module, cause):
    out = probe(FAKE_TORCH_NPU, broken=broken)
    for requested in ("auto", "npu"):
        assert f"{requested} refused: torch_npu is installed but importing {module} failed ({cause}" in out
    assert "auto cpu" not in out and "uninstall torch-npu to serve on CPU/CUDA" in out


def test_only_the_device_module_names_a_device_type():
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("DiT4DiT/serving", "DiT4DiT/evaluation")
        for path in sorted((ROOT / folder).glob("*.py"))
        if path.name != "device.py" and re.search(r"\b(npu|cuda)\b", path.read_text())
    ]
    assert offenders == []
