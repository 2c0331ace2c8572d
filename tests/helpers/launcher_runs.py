"""The training launcher for tests: `scripts/train_8p.sh` run for real, or its plan (`python -m DiT4DiT.launch`,
which the script runs first) called in this process with the environment the script would give it.

A fake `npu-smi` (tests/fakes/bin) plays an A2 node, an A3 node or no NPU at all (layout a2 / a3 / None). The
in-process plan is for what the script only prints or refuses (dry runs, usage and preflight errors): the script
hands those from the planner through unchanged, so the same stdout, stderr and exit status come back.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


@contextlib.contextmanager
def _process_state(env: dict[str, str], paths: list[str]):
    """os.environ replaced by `env`, `paths` first on sys.path, the repository the working folder; all put back."""
    saved_env, saved_path, saved_cwd = dict(os.environ), sys.path[:], os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = paths
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_env)


def plan(*args: str, layout: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """What `launch(*args)` prints and returns when the script stops after the plan, computed in this process.

    The script exports PYTHONPATH=<repository>:$PYTHONPATH before planning; entries besides the repository (a fake
    torch_npu) go onto sys.path, where the planner's import lookups see them.
    """
    from DiT4DiT.launch.__main__ import main

    full_env = launcher_env(layout, env)
    extra = [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *extra])
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder, _process_state(full_env, extra):
        shell_plan = Path(folder) / "plan"
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([f"--shell_plan={shell_plan}", *args])
            except SystemExit as stop:  # argparse: --help, usage errors
                code = stop.code if isinstance(stop.code, int) else 2
        started = shell_plan.exists() and shell_plan.stat().st_size > 0
    assert not started, f"the plan would start training: {args}"  # only plans the script stops after
    return subprocess.CompletedProcess(["DiT4DiT.launch", *args], code, out.getvalue(), err.getvalue())
