"""Layers point down: every import inside DiT4DiT/, lazy ones included, read with `ast`, goes to a unit of the same
layer or a lower one, and no two units import each other (directly or round a cycle).

A unit is a subpackage (DiT4DiT/config/) or a top-level module (DiT4DiT/facts.py). The order follows a batch:
facts and small shared helpers, the base-model snapshot read without weights, the config, data and model, this
host (NPUs, processes, what an output path may replace: it knows a dataset folder), what estimates a run's memory,
what runs a model (serving, evaluation, training), the launcher that starts training, and the doctor and tools on
top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "DiT4DiT"
LAYERS = [
    {"facts", "errors", "atomic_files", "yaml_files", "logging_setup", "requirements_check"},
    {"base_model"},
    {"config"},
    {"dataloader", "model"},
    {"host"},
    {"memory"},
    {"serving", "evaluation", "training"},
    {"launch"},
    {"doctor", "tools"},
]
LAYER_OF = {unit: number for number, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """DiT4DiT.config.schema -> config; DiT4DiT.facts -> facts."""
    return module.split(".")[1]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, module) for every import of a DiT4DiT module in `path`; `from DiT4DiT import x` names DiT4DiT.x."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package upwards
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *filter(None, [base])])
            if base == "DiT4DiT":
                found += [(node.lineno, f"DiT4DiT.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
    return [(line, name) for line, name in found if name.startswith("DiT4DiT.")]


def imports() -> list[tuple[str, int, str, str]]:
    """(file, line, source unit, imported module) for every import between two units."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name == "DiT4DiT":
            continue
        source = unit_of(name)
        found += [(str(path.relative_to(PACKAGE.parent)), line, source, target) for line, target in imported(path)
                  if unit_of(target) != source]
    return found


def test_every_unit_has_a_layer():
    units = {unit_of(module_name(path)) for path in PACKAGE.rglob("*.py") if module_name(path) != "DiT4DiT"}
    assert units - set(LAYER_OF) == set(), "put each new unit of DiT4DiT/ into a layer of LAYERS"
    assert set(LAYER_OF) - units == set(), "a unit of LAYERS no longer exists: remove it"


def test_imports_point_down():
    upward = [(file, line, target) for file, line, source, target in imports()
              if LAYER_OF[unit_of(target)] > LAYER_OF[source]]
    assert upward == [], "\n".join(f"{file}:{line} imports {target}, a layer above" for file, line, target in upward)


def test_no_two_units_import_each_other():
    edges: dict[str, set[str]] = {}
    for _, _, source, target in imports():
        edges.setdefault(source, set()).add(unit_of(target))
    done: set[str] = set()

    def cycle_from(unit: str, path: list[str]) -> list[str] | None:
        if unit in path:
            return path[path.index(unit):] + [unit]
        if unit in done:
            return None
        for after in sorted(edges.get(unit, ())):
            if found := cycle_from(after, [*path, unit]):
                return found
        done.add(unit)
        return None

    for unit in sorted(edges):
        assert cycle_from(unit, []) is None, " -> ".join(cycle_from(unit, []))


@pytest.mark.parametrize("source, expected", [
    ("from DiT4DiT.doctor import time_plan\n", "DiT4DiT.doctor"),
    ("from DiT4DiT import memory\n", "DiT4DiT.memory"),
    ("def f():\n    import DiT4DiT.tools.outputs\n", "DiT4DiT.tools.outputs"),
    ("from ..doctor import checks\n", "DiT4DiT.doctor"),
])
def test_the_reader_sees_every_form_of_import(tmp_path, source, expected):
    package = tmp_path / "DiT4DiT" / "launch"
    package.mkdir(parents=True)
    (package / "plan.py").write_text(source)
    assert [name for _, name in imported(package / "plan.py", tmp_path / "DiT4DiT")] == [expected]
