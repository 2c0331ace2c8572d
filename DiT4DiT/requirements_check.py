"""An entry point's first check: the packages it imports are installed in the Python that runs it.

A missing one is one line naming that Python, what it lacks and the command that installs it, with exit status 2,
instead of a ModuleNotFoundError traceback before anything starts (on a fresh Ascend host the launcher's --help
is the first command a user runs). Stdlib only and nothing imported (importlib.util.find_spec finds a package
without running it: torch_npu would need CANN), so it runs on any Python 3 that can read the package at all.
"""

import importlib.util
import os
import sys

EXIT_MISSING = 2  # as the launcher's usage and preflight problems: nothing was started

# import name -> pip name, for each kind of entry point (what its imports reach, measured with sys.modules).
CONFIG = {"omegaconf": "omegaconf", "yaml": "pyyaml"}
TRAINING = dict(CONFIG, torch="torch", torchvision="torchvision", accelerate="accelerate", diffusers="diffusers",
                transformers="transformers", safetensors="safetensors", numpy="numpy", pyarrow="pyarrow",
                pandas="pandas", av="av", PIL="pillow")
DATA_TOOLS = {"numpy": "numpy", "pyarrow": "pyarrow", "pandas": "pandas", "av": "av"}


def lacking(modules: dict) -> list:
    """The pip names of the modules this Python cannot import (found without importing them)."""
    missing = []
    for name, pip_name in modules.items():
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or half-installed package
            found = False
        if not found:
            missing.append(pip_name)
    return missing


def install_hint(launcher: bool) -> str:
    ascend = os.path.exists("/dev/davinci_manager") or any(
        os.path.exists(os.path.join(d, "npu-smi")) for d in os.environ.get("PATH", "").split(os.pathsep) if d)
    here = "make venv (in the checkout; it installs requirements.txt into .venv)"
    npu = "pip install -r requirements-npu.txt (Ascend hosts, CANN sourced)"
    commands = [npu, here] if ascend else [here, npu]
    other = ("or set PYTHON=/path/to/python that has them (.venv/bin/python after make venv)" if launcher
             else "or run it with a Python that has them (.venv/bin/python after make venv)")
    return "install with {}, or {}; {}".format(commands[0], commands[1], other)


def require(entry: str, modules: dict, launcher: bool = False) -> None:
    """Exit with one line and EXIT_MISSING when this Python lacks any of `modules`."""
    missing = lacking(modules)
    if missing:
        version = ".".join(map(str, sys.version_info[:3]))
        sys.stderr.write("{}: {} (Python {}) lacks {}; {}\n".format(
            entry, sys.executable, version, ", ".join(missing), install_hint(launcher)))
        raise SystemExit(EXIT_MISSING)
