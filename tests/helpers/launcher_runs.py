"""The training launcher for tests: `scripts/train_8p.sh` run for real, or its planning half (the `prepare()` of
`python -m DiT4DiT.launch`, which the script execs) called in this process with the environment the script gives it.

A fake `npu-smi` (tests/fakes/bin) plays an A2 node, an A3 node or no NPU at all (layout a2 / a3 / None). The
in-process plan is for what the launcher only prints or refuses (dry runs, usage and preflight errors): those
come from `prepare()` alone, so the same stdout, stderr and exit status come back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .in_process import ROOT, call_main

LAUNCHER = ROOT / "scripts" / "train_8p.sh"
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"


def host_path() -> str:
    """PATH without any real npu-smi, with the test interpreter's bin first."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(FAKE_BIN)]
    dirs = [str(Path(sys.executable).parent)] + [d for d in dirs if not (Path(d) / "npu-smi").exists()]
    return os.pathsep.join(dirs)


def launcher_env(layout: str | None = None, env: dict | None = None) -> dict[str, str]:
    """The caller's environment without Ascend/HCCL/DiT4DiT settings; layout a2/a3 puts the fake npu-smi on PATH."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_", "TORCH_HCCL", "DIT4DIT_"))}
    full_env.update(PYTHON=sys.executable, PATH=host_path())
    if layout is not None:
        full_env.update(PATH=f"{FAKE_BIN}{os.pathsep}{full_env['PATH']}", FAKE_NPU_SMI_LAYOUT=layout)
    full_env.update(env or {})
    return full_env


def launch(*args: str, layout: str | None = None, env: dict | None = None, timeout: int = 120):
    """Run the launcher script, waited for; the result holds its exit status and output."""
    return subprocess.run(["bash", str(LAUNCHER), *args], cwd=ROOT, env=launcher_env(layout, env), capture_output=True,
                          text=True, timeout=timeout)


def plan(*args: str, layout: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """What `launch(*args)` prints and returns when the script stops after the plan, computed in this process.

    The script exports PYTHONPATH=<repository>:$PYTHONPATH before planning (a fake torch_npu in it is found).
    """
    from DiT4DiT.errors import run_main
    from DiT4DiT.launch.run import PROG, prepare

    def planned(argv: list[str]) -> int:
        decided = prepare(argv)
        # Only for what the launcher stops after: a plan returned is one it would go on to run.
        assert isinstance(decided, int), f"the plan would start training: {args}"
        return decided

    full_env = launcher_env(layout, env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, full_env.get("PYTHONPATH", "").split(os.pathsep))])
    result = call_main(lambda argv: run_main(lambda: planned(argv), PROG), list(args), full_env)
    result.args = ["DiT4DiT.launch", *args]
    return result
