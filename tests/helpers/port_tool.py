"""scripts/port_to_npu.py loaded as a module (it is a script, not in a package), and the tree it is tried on."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "scripts" / "port_to_npu.py"
FIXTURE = ROOT / "tests" / "fixtures" / "original_tree"

spec = importlib.util.spec_from_file_location("port_to_npu", TOOL)
port_to_npu = sys.modules["port_to_npu"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(port_to_npu)
TRAIN, FRAMEWORK = port_to_npu.TRAIN, port_to_npu.FRAMEWORK


def snapshot(tree: Path) -> dict[str, str]:
    return {rel: (tree / rel).read_text() for rel in (TRAIN, FRAMEWORK)}
