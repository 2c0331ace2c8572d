"""A command's `main(argv)` called in this process as if it had been started as a process: with the environment
it would get, the repository as its working folder, its stdout and stderr captured, and its exit status.

For commands whose output is what a test checks (the launcher's plan, the doctor, start-up errors): no interpreter start and no
imports again. Whatever a command starts itself (the doctor's probes, npu-smi) still runs as a process, with
this environment.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def process_state(env: dict[str, str], paths: list[str]):
    """os.environ replaced by `env`, `paths` first on sys.path (what PYTHONPATH would add), the repository the
    working folder; these and the root logger (entry points call logging.basicConfig) put back afterwards."""
    saved_env, saved_path, saved_cwd = dict(os.environ), sys.path[:], os.getcwd()
    root = logging.getLogger()
    saved_logging = root.handlers[:], root.level
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = paths
    os.chdir(ROOT)
    try:
        yield
    finally:
        root.handlers[:], root.level = saved_logging
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_env)


def call_main(main: Callable[[list[str]], int], argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`main(argv)` under `env` (its PYTHONPATH entries on sys.path); SystemExit (argparse) is its exit status."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    out, err = io.StringIO(), io.StringIO()
    with process_state(env, paths), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
    return subprocess.CompletedProcess([getattr(main, "__module__", "main"), *argv], code, out.getvalue(), err.getvalue())
