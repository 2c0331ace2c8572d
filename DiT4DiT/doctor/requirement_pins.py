"""The exact pins of a requirement file for one CPU architecture and Python version (markers evaluated for that
target, not for this machine), for the offline requirement tests and scripts/resolve_requirements.py."""

from __future__ import annotations

from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def read_pins(path: Path, machine: str, python: str = "3.11") -> dict[str, str]:
    """name -> pinned version; ValueError on anything that is not one exact pin per package."""
    # Every marker variable is text; packaging's Environment (a TypedDict) reads as a map to object.
    env = {name: str(value) for name, value in default_environment().items()}
    env.update(platform_machine=machine, python_version=python, python_full_version=f"{python}.0")
    pins: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith(("#", "--")):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise ValueError(f"{Path(path).name}: '{line}' is not an exact pin")
        name = canonicalize_name(req.name)
        if name in pins:
            raise ValueError(f"{Path(path).name}: {name} pinned twice for {machine}, Python {python}")
        pins[name] = specs[0].version
    return pins
