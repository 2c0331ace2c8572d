"""Resolve a requirement file for another machine, every dependency included (needs uv and the package index).

    pip install uv packaging && PYTHONPATH=. python scripts/resolve_requirements.py requirements-npu.txt
    pip install uv packaging && PYTHONPATH=. python scripts/resolve_requirements.py --write-record

pip cannot do this: with --platform it still evaluates its dependencies' markers for the machine it runs on (on
x86_64 it asks torch for CUDA wheels that aarch64 has not). `uv pip compile --python-platform --python-version`
evaluates them for the target. Each target's pins are taken out of the file (markers evaluated for it) and
resolved with wheels only. Left out, and said so: sdists (deepspeed, resolvable only by building it) and, on
x86_64, torch_npu, whose x86_64 wheels need torch's +cpu build from PyTorch's CPU index (the +cpu pins are
resolved as their PyPI twins of the same version).

--write-record writes requirements-resolved.json, which tests/test_requirements_resolved.py checks offline: per
requirement file and target, the resolved set, each pin's Requires-Python and whether PyPI has a wheel for the
target (from PyPI's simple API, which uv reads too), and the sha256 of the file it was made from.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from functools import cache
from pathlib import Path

from packaging import tags
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from DiT4DiT.doctor.requirement_pins import read_pins

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "requirements-resolved.json"
RECORDED = ("requirements.txt", "requirements-npu.txt")
REGENERATE = "pip install uv packaging && PYTHONPATH=. python scripts/resolve_requirements.py --write-record"
PYPI_SIMPLE = "https://pypi.org/simple"
SDISTS = {"deepspeed"}
PYTORCH_INDEX_ONLY = {"torch-npu"}  # x86_64: needs torch==2.7.1+cpu
TARGETS = [(machine, python) for machine in ("aarch64", "x86_64") for python in ("3.10", "3.11")]
GLIBC = 28  # uv's target is <machine>-manylinux_2_28


def left_out(path: Path, machine: str, python: str) -> dict[str, str]:
    """Pins of this target that are not resolved, with the reason."""
    reasons = {name: "sdist only: resolvable only by building it" for name in SDISTS}
    if machine == "x86_64":
        reasons.update({name: "x86_64 wheels need torch's +cpu build from PyTorch's CPU index"
                        for name in PYTORCH_INDEX_ONLY})
    pins = read_pins(path, machine, python)
    return {name: reason for name, reason in reasons.items() if name in pins}


def pins_for(path: Path, machine: str, python: str) -> list[str]:
    skipped = left_out(path, machine, python)
    return [f"{name}=={version.split('+')[0]}" for name, version in read_pins(path, machine, python).items()
            if name not in skipped]


def uv(*args: str) -> subprocess.CompletedProcess:
    # Never download a Python: uv only needs the target's version number to resolve.
    return subprocess.run([sys.executable, "-m", "uv", *args], capture_output=True, text=True,
                          env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})


def compile_pins(path: Path, machine: str, python: str) -> dict[str, str]:
    """name -> version of the whole resolved set; RuntimeError with uv's explanation when it does not resolve."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
        pins.write("\n".join(pins_for(path, machine, python)) + "\n")
        pins.flush()
        result = uv("pip", "compile", pins.name, "--no-header", "--no-annotate", "--only-binary=:all:",
                    f"--python-platform={machine}-manylinux_2_{GLIBC}", f"--python-version={python}")
    if result.returncode != 0:
        raise RuntimeError(f"{path.name} on {machine}, Python {python} does not resolve:\n{result.stderr.strip()}")
    resolved = {}
    for line in result.stdout.splitlines():
        name, _, version = line.partition("==")
        resolved[canonicalize_name(name)] = version.strip()
    return resolved


@cache
def index_files(name: str) -> tuple[dict, ...]:
    """The files PyPI lists for a project (PEP 691 JSON), each with its filename and requires-python."""
    request = urllib.request.Request(f"{PYPI_SIMPLE}/{name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return tuple(json.load(response)["files"])


def target_tags(machine: str, python: str) -> set[tags.Tag]:
    version = tuple(int(part) for part in python.split("."))
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    platforms = []
    for minor in range(GLIBC, 4, -1):
        platforms.append(f"manylinux_2_{minor}_{machine}")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_{machine}")
    return {*tags.cpython_tags(version, platforms=platforms),
            *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms)}


def pin_metadata(name: str, version: str, machine: str, python: str) -> dict:
    """Requires-Python of the release and whether it has a wheel for the target, from PyPI's index."""
    public = Version(version).public  # a +cpu build is looked up as its PyPI twin
    accepted = target_tags(machine, python)
    wheels, sdists = [], []
    for file in index_files(name):
        filename = file["filename"]
        if filename.endswith(".whl"):
            _, wheel_version, _, wheel_tags = parse_wheel_filename(filename)
            if wheel_version == Version(public) and wheel_tags & accepted:
                wheels.append(file)
        elif filename.endswith((".tar.gz", ".zip")):
            try:
                _, sdist_version = parse_sdist_filename(filename)
            except ValueError:
                continue  # an old, non-normalised sdist name of another release
            if sdist_version == Version(public):
                sdists.append(file)
    chosen = (wheels or sdists or [{}])[0]
    metadata = {"version": version, "requires_python": chosen.get("requires-python") or "", "wheel": bool(wheels)}
    if public != version:
        metadata["looked_up_as"] = f"{public} on PyPI (the {version} build is on PyTorch's CPU index)"
    if not chosen:
        metadata["on_index"] = False
    return metadata


def record_target(path: Path, machine: str, python: str) -> dict:
    pins = read_pins(path, machine, python)
    return {"platform": f"{machine}-manylinux_2_{GLIBC}", "python": python,
            "resolved": compile_pins(path, machine, python),
            "pins": {name: pin_metadata(name, version, machine, python) for name, version in pins.items()},
            "left_out": left_out(path, machine, python)}


def write_record() -> dict:
    record = {"regenerate": REGENERATE, "uv": uv("--version").stdout.strip(),
              "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "index": PYPI_SIMPLE,
              "files": {}}
    for name in RECORDED:
        path = ROOT / name
        record["files"][name] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "targets": {f"{machine}-py{python}": record_target(path, machine, python) for machine, python in TARGETS}}
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return record


def summary(record: dict) -> str:
    lines = [f"{RECORD.name}: {record['uv']}, {record['date']}, {record['index']}"]
    for name, entry in record["files"].items():
        for key, target in entry["targets"].items():
            resolved, pins = target["resolved"], target["pins"]
            no_wheel = sorted(pin for pin, meta in pins.items() if not meta["wheel"])
            shown = ", ".join(f"{pin}=={resolved[pin]}" for pin in ("torch", "protobuf", "wandb") if pin in resolved)
            lines.append(f"{name} {key}: {len(resolved)} resolved from {len(pins)} pins ({shown}); left out: "
                         f"{', '.join(target['left_out']) or 'none'}; no wheel: {', '.join(no_wheel) or 'none'}")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-record"]:
        print(summary(write_record()))
    else:
        for machine, python in TARGETS:
            try:
                resolved = " ".join(f"{n}=={v}" for n, v in compile_pins(Path(sys.argv[1]), machine, python).items())
            except RuntimeError as error:
                resolved = str(error)
            print(f"== {sys.argv[1]} on {machine}, Python {python}\n{resolved}")
