"""scripts/port_to_npu.py on the fixture tree (the original's shapes of code) and on small variants."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.port_tool import FIXTURE, FRAMEWORK, TOOL, TRAIN, port_to_npu, snapshot


def run_tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def git(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def git_tree(tmp_path: Path, source: Path = FIXTURE) -> Path:
    """A committed git repository holding a copy of `source` (a fresh checkout to apply patches to)."""
    tree = tmp_path / "tree"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        assert git(tree, *args).returncode == 0
    return tree


def calls_named(source: str, dotted: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and port_to_npu._dotted(n.func) == dotted]


def test_fixture_ports_every_site():
    originals = snapshot(FIXTURE)
    train = port_to_npu.port_source(TRAIN, originals[TRAIN])
    framework = port_to_npu.port_source(FRAMEWORK, originals[FRAMEWORK])
    assert not train.missing and not framework.missing
    for result in (train, framework):
        assert not [c for c in calls_named(result.source, "torch.autocast") if port_to_npu._cuda_device_arg(c)]
        assert "from torch_npu.contrib import transfer_to_npu\n" in result.source.replace("  # noqa: F401  maps cuda calls onto npu", "")
        assert port_to_npu.AUTOCAST_HELPERS in result.source  # one template, identical in both files
    assert len(calls_named(train.source, "_npu_autocast")) == 1
    assert len(calls_named(framework.source, "_npu_autocast")) == 4
    (adamw,) = calls_named(train.source, "torch.optim.AdamW")
    assert [k.arg for k in adamw.keywords] == ["lr", "betas", "weight_decay", "eps", "fused"]
    assert adamw.keywords[-1].value.value is True
    assert port_to_npu.PATCHER_HELPER in train.source and "_mx_driving_patcher" not in framework.source
    main_guard = ast.parse(train.source).body[-1]
    assert len(main_guard.body) == 1 and ast.unparse(main_guard.body[0].items[0]) == "_mx_driving_patcher()"
    # The dtype expression and the other lines are kept byte for byte.
    assert "_npu_autocast(dtype=torch.bfloat16 if self.use_bf16 else torch.float32)" in train.source
    kept = [line for line in originals[FRAMEWORK].splitlines() if "autocast" not in line and line.strip() not in ('"cuda",', "dtype=torch.float32,", "):")]
    assert all(line in framework.source.splitlines() for line in kept)


def test_in_place_port_is_idempotent(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    first = run_tool(tree)
    assert first.returncode == 0, first.stderr
    assert "ported" in first.stdout and 'torch.autocast("cuda", dtype=torch.bfloat16) -> _npu_autocast(' in first.stdout
    ported = snapshot(tree)
    assert ported != snapshot(FIXTURE)
    second = run_tool(tree)
    assert second.returncode == 0 and "already ported" in second.stdout
    assert snapshot(tree) == ported


def test_emitted_patch_applies_with_git_and_reverses(tmp_path):
    tree = git_tree(tmp_path)
    patch = tmp_path / "npu.patch"
    result = run_tool(tree, "--emit-patch", patch)
    assert result.returncode == 0, result.stderr
    assert git(tree, "status", "--porcelain").stdout == ""  # the checkout is left unchanged
    text = patch.read_text()
    assert text.startswith(f"diff --git a/{TRAIN} b/{TRAIN}\n--- a/{TRAIN}\n+++ b/{TRAIN}\n@@ ")
    assert f"diff --git a/{FRAMEWORK} b/{FRAMEWORK}\n" in text

    assert git(tree, "apply", "--check", str(patch)).returncode == 0
    assert git(tree, "apply", str(patch)).returncode == 0
    in_place = tmp_path / "in_place"
    shutil.copytree(FIXTURE, in_place)
    run_tool(in_place)
    assert snapshot(tree) == snapshot(in_place)  # the patch and the in-place port agree

    again = git(tree, "apply", "--check", str(patch))
    assert again.returncode != 0 and "patch does not apply" in again.stderr
    assert git(tree, "apply", "-R", "--check", str(patch)).returncode == 0
    assert git(tree, "apply", "-R", str(patch)).returncode == 0
    assert git(tree, "status", "--porcelain").stdout == ""


def test_check_reports_current_and_stale_patch(tmp_path):
    patch = tmp_path / "npu.patch"
    run_tool(FIXTURE, "--emit-patch", patch)
    current = run_tool(FIXTURE, "--check", "--patch", patch)
    assert current.returncode == 0 and "is current" in current.stdout

    patch.write_text(patch.read_text().replace("fused=True", "fused=False"))
    stale = run_tool(FIXTURE, "--check", "--patch", patch)
    assert stale.returncode == 1
    assert "stale: regenerate with python scripts/port_to_npu.py . --emit-patch patches/dit4dit_npu.patch" in stale.stderr

    missing = run_tool(FIXTURE, "--check", "--patch", tmp_path / "absent.patch")
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_every_missing_site_is_reported_and_nothing_written(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    framework = tree / FRAMEWORK
    # Drop one of the four autocast sites, the optimizer and the entry block.
    framework.write_text(framework.read_text().replace('with torch.autocast("cuda", dtype=torch.bfloat16):', "if True:", 1))
    train = tree / TRAIN
    source = train.read_text()
    source = source.replace("torch.optim.AdamW(", "torch.optim.SGD(").rsplit('\nif __name__ == "__main__":', 1)[0]
    train.write_text(source)
    before = snapshot(tree)

    result = run_tool(tree)
    assert result.returncode == 2
    assert f'{FRAMEWORK}: found 3 torch.autocast("cuda", ...) call(s), expected 4' in result.stderr
    assert f"no torch.optim.AdamW(...) call in {TRAIN}" in result.stderr
    assert f"no if __name__ == '__main__' block in {TRAIN}" in result.stderr
    assert snapshot(tree) == before
    assert run_tool(tree, "--emit-patch", tmp_path / "p.patch").returncode == 2
    assert not (tmp_path / "p.patch").exists()


def test_file_without_autocast_is_reported():
    result = port_to_npu.port_source(FRAMEWORK, "import torch\n\n\ndef f():\n    return 1\n")
    assert result.missing == [f'no torch.autocast("cuda", ...) call found in {FRAMEWORK} (expected 4)']


def test_not_a_checkout_lists_missing_files(tmp_path):
    (tmp_path / "DiT4DiT" / "training").mkdir(parents=True)
    (tmp_path / TRAIN).write_text("import torch\n")
    result = run_tool(tmp_path)
    assert result.returncode == 2
    assert "is not a DiT4DiT checkout: missing DiT4DiT/model/framework/DiT4DiT.py" in result.stderr
    assert TRAIN not in result.stderr.split("missing")[1]
    empty = run_tool(tmp_path / "DiT4DiT")
    assert f"missing {TRAIN}, {FRAMEWORK}" in empty.stderr


def test_syntax_error_names_the_file(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    (tree / FRAMEWORK).write_text("def broken(:\n")
    result = run_tool(tree)
    assert result.returncode == 2 and f"{FRAMEWORK} is not valid Python (line 1)" in result.stderr


VARIANT = '''\
import sys
import torch
from torch import nn


def step(model, batch):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16), torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(batch)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False)


if __name__ == "__main__":
    sys.exit(main())'''


def test_variants_keyword_device_existing_fused_and_no_dist_import():
    result = port_to_npu.port_source(TRAIN, VARIANT)
    assert not result.missing
    source = result.source
    # The guarded import follows the last torch import when there is no `import torch.distributed as dist`.
    assert source.index("from torch import nn\n") < source.index('if importlib.util.find_spec("torch_npu")') < source.index("\n\ndef step")
    assert "with _npu_autocast(dtype=torch.bfloat16), torch.no_grad():" in source
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):' in source  # not a cuda site: untouched
    assert "torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)" in source
    assert source.endswith('if __name__ == "__main__":\n    with _mx_driving_patcher():\n        sys.exit(main())')
    assert port_to_npu.port_source(TRAIN, source).changes == []


def test_patch_of_file_without_final_newline_applies(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    (tree / TRAIN).write_text(VARIANT)
    repo = git_tree(tmp_path / "repo", tree)
    patch = tmp_path / "npu.patch"
    assert run_tool(repo, "--emit-patch", patch).returncode == 0
    assert "\\ No newline at end of file\n" in patch.read_text()
    assert git(repo, "apply", str(patch)).returncode == 0
    assert (repo / TRAIN).read_text() == port_to_npu.port_source(TRAIN, VARIANT).source


@pytest.mark.slow
def test_ported_fixture_trains_on_cpu_without_torch_npu(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    run_tool(tree)
    result = subprocess.run(
        [sys.executable, "-W", "default", str(tree / TRAIN), "--steps", "30"],
        capture_output=True, text=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    losses = __import__("json").loads(result.stdout.splitlines()[-1])["losses"]
    assert losses[-1] < losses[0]
    fallback = "torch_npu is not importable (No module named 'torch_npu'); autocast runs on cpu instead of npu"
    # Once per run (not per step, not per ported file); no torch warning about a float32 CPU autocast.
    assert result.stderr.count(f"RuntimeWarning: {fallback}") == 1
    assert result.stderr.count("RuntimeWarning: mx_driving is not importable") == 1
    assert "CPU Autocast only supports" not in result.stderr and "CUDA is not available" not in result.stderr


def test_the_step_profiler_gets_torch_npu_profiler_and_a_second_port_changes_nothing():
    """Our train.py hands torch.profiler to its step profiler (trainer.profile_steps): ported, it hands
    _profiler_api() (torch_npu.profiler with torch_npu), whose helper comes only to a file that profiles."""
    ours = (Path(__file__).resolve().parents[1] / TRAIN).read_text()
    ported = port_to_npu.port_source(TRAIN, ours, "DiT4DiTError")
    assert not ported.missing and port_to_npu.PROFILER_HELPER in ported.source
    assert port_to_npu._profiler_nodes(ast.parse(ported.source)) == []  # none left outside the helper
    assert "step_profiler(_profiler_api()," in ported.source
    assert port_to_npu.port_source(TRAIN, ported.source, "DiT4DiTError").source == ported.source
    original = port_to_npu.port_source(TRAIN, snapshot(FIXTURE)[TRAIN])
    assert "_profiler_api" not in original.source
