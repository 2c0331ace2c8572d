"""The port tool checks its result: no autocast left on cuda in any form, every helper it calls defined, and the
files compile; otherwise exit 2 with file:line per problem and nothing written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers.port_tool import FIXTURE, FRAMEWORK, TOOL, TRAIN, port_to_npu, snapshot


def half_port_tree(tmp_path: Path, rel: str, old: str, new: str) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree, ignore=shutil.ignore_patterns("__pycache__"))
    path = tree / rel
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    return tree


def refused_port(tree: Path) -> str:
    """Run the tool on `tree`: it must exit 2 and leave the tree as it was; returns its stderr."""
    before = snapshot(tree)
    result = subprocess.run([sys.executable, str(TOOL), str(tree)], capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "ported" not in result.stdout
    assert snapshot(tree) == before
    return result.stderr


def line_of(tree: Path, rel: str, text: str) -> int:
    """The first code line starting with `text` (docstrings mention the same calls mid-line)."""
    return next(n for n, line in enumerate((tree / rel).read_text().splitlines(), 1) if line.strip().startswith(text))


def test_a_hand_added_torch_npu_import_is_not_reported_as_ported(tmp_path):
    tree = half_port_tree(tmp_path, TRAIN, "import torch.distributed as dist  # noqa",
                          "try:\n    import torch_npu  # noqa: F401\nexcept ImportError:\n    pass\n"
                          "import torch.distributed as dist  # noqa")
    stderr = refused_port(tree)
    autocast_line = line_of(tree, TRAIN, 'with torch.autocast("cuda"')
    assert f"{TRAIN}:{autocast_line}: uses _npu_autocast, which the file does not define" in stderr
    main_line = line_of(tree, TRAIN, "if __name__ ==")
    assert f"{TRAIN}:{main_line + 1}: uses _mx_driving_patcher, which the file does not define" in stderr


def test_a_cuda_amp_autocast_left_in_place_fails_with_its_line(tmp_path):
    tree = half_port_tree(tmp_path, FRAMEWORK, "            actions = self.action_model(features.float())\n",
                          "            actions = self.action_model(features.float())\n"
                          "        with torch.cuda.amp.autocast(dtype=torch.bfloat16):\n"
                          "            actions = actions * 1\n")
    line = line_of(tree, FRAMEWORK, "with torch.cuda.amp.autocast")
    assert f"{FRAMEWORK}:{line}: torch.cuda.amp.autocast(...) is a cuda-only autocast" in refused_port(tree)


def test_every_other_spelling_of_a_cuda_autocast_is_found():
    source = (
        "import torch\n"
        "from torch.cuda.amp import autocast\n"
        "from torch import autocast as generic\n"
        "import torch.amp as amp\n"
        'DEVICE = "cuda"\n'
        "def f():\n"
        "    with autocast():\n"
        "        pass\n"
        "    with generic(DEVICE, dtype=torch.bfloat16):\n"
        "        pass\n"
        '    with amp.autocast(device_type="cuda"):\n'
        "        pass\n"
        '    with torch.autocast("cpu"):\n'
        "        pass\n"
    )
    problems = [p for p in port_to_npu.post_condition_problems(FRAMEWORK, source) if "autocast" in p.split(": ", 1)[1]]
    assert [p.split(": ")[0] for p in problems] == [f"{FRAMEWORK}:7", f"{FRAMEWORK}:9", f"{FRAMEWORK}:11"]
    assert 'the device comes from variable DEVICE = "cuda"' in problems[1]


def test_a_result_that_does_not_compile_is_reported():
    assert port_to_npu.post_condition_problems(TRAIN, "import torch\nreturn torch\n") == [
        f"{TRAIN}:2: does not compile: 'return' outside function"]


def test_the_fixture_and_this_repository_port_cleanly():
    for tree in (FIXTURE, Path(__file__).resolve().parents[1]):
        for rel, result in port_to_npu.port_checkout(tree).items():
            assert port_to_npu.post_condition_problems(rel, result.source) == []
