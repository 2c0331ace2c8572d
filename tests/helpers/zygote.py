"""A Python process that imports torch once, then forks a fresh child for each script it is asked to run.

Importing torch (and torch._dynamo, which the first optimizer imports) is 5 of the 7 CPU-seconds a run of the
ported fixture costs, and tests/test_npu_patch.py runs it a dozen times. A child starts where a new interpreter
would be right after `import torch`: it takes the run's environment, sys.path (its PYTHONPATH), argv, working
folder and output files, and nothing it does reaches the next child. Only torch's own import-time state is shared,
which every run would build the same way before the code under test imports torch_npu.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

SERVER = r"""
import json, os, runpy, sys, traceback
import torch, torch._dynamo

site_path = sys.path[1:]  # sys.path[0] is this -c program's ''
for line in sys.stdin:
    run = json.loads(line)
    child = os.fork()
    if child == 0:
        code = 1
        try:
            for fd, name in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(run[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            os.chdir(run["cwd"])
            os.environ.clear()
            os.environ.update(run["env"])
            pythonpath = [p for p in run["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[:] = [os.path.dirname(os.path.abspath(run["argv"][0])), *pythonpath, *site_path]
            sys.argv = run["argv"]
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as stop:  # what the interpreter makes of it
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(child, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Zygote:
    """`run()` is subprocess.run([python, *python_options, *argv], ...) through one torch-importing process."""

    def __init__(self, folder: Path, *python_options: str):
        self.folder, self.options = folder, python_options  # folder: where each run's output is written
        self.process: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, *self.options, "-c", SERVER], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, start_new_session=True)
        return self.process

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        process = self._start()
        out, err = self.folder / "stdout", self.folder / "stderr"
        process.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out),
                                        "stderr": str(err)}) + "\n")
        process.stdin.flush()
        if not select.select([process.stdout], [], [], timeout)[0]:
            self.close()  # the child and the zygote go together; the next run starts a new one
            raise subprocess.TimeoutExpired(argv, timeout)
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote process ended (exit code {process.wait()}); its stderr is the test's")
        returncode = json.loads(line)["returncode"]
        return subprocess.CompletedProcess(argv, returncode, out.read_text(), err.read_text())

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait()
