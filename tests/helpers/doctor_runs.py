"""The doctor on this host or on an A2/A3 host played by the fake npu-smi (tests/fakes/bin): as users run it
(`python -m DiT4DiT.doctor`), or its `main()` in this process with the same environment (its probes still run
as processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .in_process import ROOT, call_main

FAKE_BIN = ROOT / "tests" / "fakes" / "bin"
TINY_YAML = ROOT / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def fake_npu_smi(layout: str, **env: str) -> str:
    return subprocess.run([str(FAKE_BIN / "npu-smi"), "info"], env={**os.environ, "FAKE_NPU_SMI_LAYOUT": layout, **env},
                          capture_output=True, text=True, check=True).stdout


def doctor_env(layout: str | None, env: dict[str, str]) -> dict[str, str]:
    """The caller's environment without Ascend/HCCL/DiT4DiT settings or a real npu-smi; layout a2/a3: the fake."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d != str(FAKE_BIN) and not (Path(d) / "npu-smi").exists()]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_", "TORCH_HCCL", "DIT4DIT_"))}
    full_env["PATH"] = os.pathsep.join(([str(FAKE_BIN)] if layout else []) + path)
    if layout:
        full_env["FAKE_NPU_SMI_LAYOUT"] = layout
    full_env.update(env)
    return full_env


def check_lines(stdout: str) -> dict[str, str]:
    """{check name: its whole line} of the doctor's report."""
    return {line.split()[1]: line for line in stdout.splitlines() if line[:4] in ("PASS", "WARN", "FAIL", "SKIP")}


def doctor(*args: str, layout: str | None = None, **env: str) -> tuple[int, dict[str, str]]:
    """The doctor's main() in this process; returns (exit code, {check name: its whole line})."""
    from DiT4DiT.doctor.checks import main

    result = call_main(main, list(args), doctor_env(layout, env))
    return result.returncode, check_lines(result.stdout)


def doctor_process(*args: str, layout: str | None = None, **env: str) -> tuple[int, dict[str, str]]:
    """`python -m DiT4DiT.doctor` as users run it; returns what `doctor` returns."""
    result = subprocess.run([sys.executable, "-m", "DiT4DiT.doctor", *args], cwd=ROOT, env=doctor_env(layout, env),
                            capture_output=True, text=True, timeout=120)
    return result.returncode, check_lines(result.stdout)
