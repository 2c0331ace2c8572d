"""The doctor run as users run it (`python -m DiT4DiT.doctor`), on this host or on an A2/A3 host played by
the fake npu-smi (tests/fakes/bin)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"
TINY_YAML = ROOT / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def fake_npu_smi(layout: str, **env: str) -> str:
    return subprocess.run([str(FAKE_BIN / "npu-smi"), "info"], env={**os.environ, "FAKE_NPU_SMI_LAYOUT": layout, **env},
                          capture_output=True, text=True, check=True).stdout


def doctor(*args: str, layout: str | None = None, **env: str) -> tuple[int, dict[str, str]]:
    """Run the doctor; returns (exit code, {check name: its whole line})."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d != str(FAKE_BIN) and not (Path(d) / "npu-smi").exists()]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_", "TORCH_HCCL", "DIT4DIT_"))}
    full_env["PATH"] = os.pathsep.join(([str(FAKE_BIN)] if layout else []) + path)
    if layout:
        full_env["FAKE_NPU_SMI_LAYOUT"] = layout
    full_env.update(env)
    result = subprocess.run([sys.executable, "-m", "DiT4DiT.doctor", *args], cwd=ROOT, env=full_env,
                            capture_output=True, text=True, timeout=120)
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line[:4] in ("PASS", "WARN", "FAIL", "SKIP")}
    return result.returncode, lines
