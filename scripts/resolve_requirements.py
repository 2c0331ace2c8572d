"""Resolve a requirement file for another machine, every dependency included (needs uv and the package index).

    pip install uv packaging && PYTHONPATH=. python scripts/resolve_requirements.py requirements-npu.txt

pip cannot do this: with --platform it still evaluates its dependencies' markers for the machine it runs on (on
x86_64 it asks torch for CUDA wheels that aarch64 has not). `uv pip compile --python-platform --python-version`
evaluates them for the target. Each target's pins are taken out of the file (markers evaluated for it) and
resolved with wheels only. Left out, and said so: sdists (deepspeed, resolvable only by building it) and, on
x86_64, torch_npu, whose x86_64 wheels need torch's +cpu build from PyTorch's CPU index (the +cpu pins are
resolved as their PyPI twins of the same version).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from DiT4DiT.doctor.requirement_pins import read_pins

SDISTS = {"deepspeed"}
PYTORCH_INDEX_ONLY = {"torch-npu"}  # x86_64: needs torch==2.7.1+cpu
TARGETS = [(machine, python) for machine in ("aarch64", "x86_64") for python in ("3.10", "3.11")]


def pins_for(path: Path, machine: str, python: str) -> list[str]:
    pins = read_pins(path, machine, python)
    return [f"{name}=={version.split('+')[0]}" for name, version in pins.items()
            if name not in SDISTS and not (machine == "x86_64" and name in PYTORCH_INDEX_ONLY)]


def resolve(path: Path, machine: str, python: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
        pins.write("\n".join(pins_for(path, machine, python)) + "\n")
        pins.flush()
        result = subprocess.run([sys.executable, "-m", "uv", "pip", "compile", pins.name, "--no-header", "--no-annotate",
                                 "--only-binary=:all:", f"--python-platform={machine}-manylinux_2_28",
                                 f"--python-version={python}"], capture_output=True, text=True)
    return result.stdout.strip().replace("\n", " ") if result.returncode == 0 else result.stderr.strip()


if __name__ == "__main__":
    for machine, python in TARGETS:
        print(f"== {sys.argv[1]} on {machine}, Python {python}\n{resolve(Path(sys.argv[1]), machine, python)}")
