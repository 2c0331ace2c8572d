"""The NPU patch: it is current, applies to our tree, and the patched entry behaves with and without the
Ascend stack. torch_npu and mx_driving are the test doubles in tests/fakes (we have no NPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.zygote import Zygote

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "scripts" / "port_to_npu.py"
PATCH = ROOT / "patches" / "dit4dit_npu.patch"
FIXTURE = ROOT / "tests" / "fixtures" / "original_tree"
FAKES = ROOT / "tests" / "fakes"
TORCH_NPU, MX_V1, MX_V2 = FAKES / "torch_npu", FAKES / "mx_driving_v1", FAKES / "mx_driving_v2"
TRAIN = "DiT4DiT/training/train.py"

# Runs a script as __main__ and writes what the ported code did: the device types of the enabled autocasts,
# the `fused` argument of every AdamW, whether transfer_to_npu was imported, and the fake patcher's calls.
DRIVER = '''
import collections, json, logging, runpy, sys
import torch

report = {"autocast": collections.Counter(), "adamw_fused": []}


class RecordingAutocast(torch.autocast):
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if enabled:  # libraries enter disabled autocasts of their own (e.g. around rotary embeddings)
            report["autocast"][device_type] += 1
        super().__init__(device_type, dtype, enabled, cache_enabled)


class RecordingAdamW(torch.optim.AdamW):
    def __init__(self, *args, **kwargs):
        report["adamw_fused"].append(kwargs.get("fused"))
        super().__init__(*args, **kwargs)


torch.autocast, torch.optim.AdamW = RecordingAutocast, RecordingAdamW
out, script, *argv = sys.argv[1:]
sys.argv = [script, *argv]
try:
    runpy.run_path(script, run_name="__main__")
    report["exit"] = 0
except SystemExit as stop:
    report["exit"] = stop.code
finally:
    report["transfer_to_npu"] = "torch_npu.contrib.transfer_to_npu" in sys.modules
    root = logging.getLogger()
    report["root_logging"] = [logging.getLevelName(root.level), len(root.handlers)]
    patcher = sys.modules.get("mx_driving.patcher")
    report["patcher_calls"] = None if patcher is None else patcher.CALLS
    with open(out, "w") as handle:
        json.dump(report, handle)
'''


def run_patched(zygote: Zygote, tmp_path: Path, tree: Path, fakes: list[Path], *args: str, env: dict | None = None):
    driver, report = tmp_path / "driver.py", tmp_path / "report.json"
    driver.write_text(DRIVER)
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DIT4DIT_", "PYTHON", "DS_"))},
        "PYTHONPATH": os.pathsep.join(map(str, [*fakes, tree])),
        "DS_ACCELERATOR": "cpu",  # DeepSpeed picks its NPU accelerator whenever `import torch_npu` works
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    result = zygote.run([str(driver), str(report), str(tree / TRAIN), *args], cwd=tree, env=environment, timeout=600)
    assert report.exists(), result.stderr
    return json.loads(report.read_text()), result


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    """Runs the driver as `python -W default driver.py ...` would, without importing torch each time."""
    python = Zygote(tmp_path_factory.mktemp("zygote"), "-W", "default")
    yield python
    python.close()


@pytest.fixture
def ported_fixture(tmp_path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    subprocess.run([sys.executable, str(TOOL), str(tree)], check=True, capture_output=True)
    return tree


def test_checked_in_patch_is_current():
    result = subprocess.run([sys.executable, str(TOOL), str(ROOT), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_patch_touches_only_the_two_device_files():
    files = [line.split(" b/")[-1] for line in PATCH.read_text().splitlines() if line.startswith("diff --git ")]
    assert files == [TRAIN, "DiT4DiT/model/framework/DiT4DiT.py"]


LEAN_V2 = ["default_patcher.disable(tensor_index,batch_matmul)", "default_patcher.apply(MultiScaleDeformableAttention,NumpyCompat)"]
LEAN_V1 = ["default_patcher_builder.disable_patches(index,batch_matmul)", "default_patcher_builder.build", "enter",
           "apply(msda,numpy_type)", "exit"]
# Unset, DIT4DIT_MX_PATCHER means mx_driving's default patcher as shipped.
DEFAULT_V2 = ["default_patcher.apply(MultiScaleDeformableAttention,NumpyCompat,TensorIndex,BatchMatmul)"]
DEFAULT_V1 = ["default_patcher_builder.build", "enter", "apply(msda,numpy_type,index,batch_matmul)", "exit"]


@pytest.mark.slow
@pytest.mark.parametrize("fake, mode, calls, applied", [
    (MX_V2, None, DEFAULT_V2, "(default; mx-driving version unknown, API 2.0): applied numpy_compat, tensor_index, "
                              "batch_matmul; importing mx_driving set ASCEND_CUSTOM_OPP_PATH="),
    (MX_V2, "lean", LEAN_V2, "(lean; mx-driving version unknown, API 2.0): applied numpy_compat; left out tensor_index, "
                             "batch_matmul; importing"),
    (MX_V2, "default", DEFAULT_V2,
     "(default; mx-driving version unknown, API 2.0): applied numpy_compat, tensor_index, batch_matmul; importing"),
    (MX_V1, None, DEFAULT_V1, "(default; mx-driving version unknown, API 1.0): applied numpy_type, index, batch_matmul "
                              "(DIT4DIT_MX_PATCHER=off skips it)"),
    (MX_V1, "lean", LEAN_V1, "(lean; mx-driving version unknown, API 1.0): applied numpy_type; left out index, "
                             "batch_matmul (DIT4DIT_MX_PATCHER=off skips it)"),
])
def test_fixture_entry_with_torch_npu_and_either_patcher_api(zygote, tmp_path, ported_fixture, fake, mode, calls,
                                                             applied):
    env = {"DIT4DIT_MX_PATCHER": mode} if mode else {}
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU, fake], "--steps", "3", env=env)
    assert report["exit"] == 0, result.stderr
    assert report["transfer_to_npu"]
    assert report["autocast"] == {"npu": 3 * 3 + 2}  # train step + 2 in forward per step, 2 in predict_action
    assert report["adamw_fused"] == [True]
    assert report["patcher_calls"] == calls  # the default patcher, entered (and, with 1.0, exited) once
    assert "RuntimeWarning" not in result.stderr
    # one start-up line names what it applied (mmcv is not installed here: its patch does not apply)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("mx_driving patcher")]
    assert applied in line
    # mx_driving's import-time logging.basicConfig(INFO) is undone: the root logger is as Python left it.
    assert report["root_logging"] == ["WARNING", 0]


@pytest.mark.slow
def test_patcher_is_exited_when_training_fails(zygote, tmp_path, ported_fixture):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU, MX_V1], "--steps", "not-a-number")
    assert report["exit"] == 2 and "invalid int value" in result.stderr
    assert report["patcher_calls"] == DEFAULT_V1[:-1] + ["exit(SystemExit)"]


@pytest.mark.slow
@pytest.mark.parametrize("fake", [MX_V1, MX_V2])
def test_a_patcher_that_fails_to_apply_is_a_warning(zygote, tmp_path, ported_fixture, fake):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU, fake], "--steps", "2",
                                 env={"FAKE_MX_DRIVING_APPLY_ERROR": "1"})
    assert report["exit"] == 0, result.stderr
    assert report["autocast"] == {"npu": 2 * 3 + 2}
    warning = "RuntimeWarning: the mx_driving patcher (default) failed to apply (RuntimeError('fake patch failure')); training without it"
    assert result.stderr.count(warning) == 1
    assert not any(call.startswith(("apply", "default_patcher.apply", "exit")) for call in report["patcher_calls"])


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"DIT4DIT_MX_PATCHER": "off"}, {"DIT4DIT_DISABLE_MX_PATCHER": "1"},
                                 {"DIT4DIT_DISABLE_MX_PATCHER": "1", "DIT4DIT_MX_PATCHER": "default"}])
def test_environment_variables_turn_the_patcher_off(zygote, tmp_path, ported_fixture, env):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU, MX_V2], "--steps", "2", env=env)
    assert report["exit"] == 0 and report["patcher_calls"] is None  # mx_driving is not even imported
    assert [line for line in result.stderr.splitlines() if "mx_driving" in line] == [
        "mx_driving patcher: off (DIT4DIT_MX_PATCHER=off or DIT4DIT_DISABLE_MX_PATCHER=1)"]


@pytest.mark.slow
def test_an_unknown_patcher_mode_stops_before_training(zygote, tmp_path, ported_fixture):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU, MX_V2], "--steps", "2",
                                 env={"DIT4DIT_MX_PATCHER": "fast"})
    assert report["exit"] == "DIT4DIT_MX_PATCHER='fast': expected one of lean, default, off"
    assert report["autocast"] == {} and report["patcher_calls"] is None


@pytest.mark.slow
def test_torch_npu_without_mx_driving_warns_and_trains(zygote, tmp_path, ported_fixture):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU], "--steps", "2")
    assert report["exit"] == 0 and report["autocast"] == {"npu": 2 * 3 + 2}
    assert report["patcher_calls"] is None
    assert result.stderr.count("RuntimeWarning: mx_driving is not importable (No module named 'mx_driving')") == 1


@pytest.mark.slow
def test_training_error_is_not_chained_to_the_missing_mx_driving(zygote, tmp_path, ported_fixture):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU], "--steps", "2", "--lr", "-1")
    assert "ValueError: Invalid learning rate: -1.0" in result.stderr
    assert "During handling of the above exception" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("broken, step, cause", [
    ("import", "import torch_npu", "ImportError('libascendcl.so: cannot open shared object file"),
    ("transfer_to_npu", "from torch_npu.contrib import transfer_to_npu",
     "ModuleNotFoundError(\"No module named 'setuptools'\")"),
])
def test_an_installed_torch_npu_that_fails_to_load_stops_with_one_line(zygote, tmp_path, ported_fixture, broken, step, cause):
    report, result = run_patched(zygote, tmp_path, ported_fixture, [TORCH_NPU, MX_V2], "--steps", "2",
                                 env={"FAKE_TORCH_NPU_BROKEN": broken})
    assert report["exit"] == 1 and report["autocast"] == {}  # stopped before training, not a CPU run
    assert result.stderr.splitlines() == [
        f"TorchNpuImportError: torch_npu is installed but `{step}` failed ({cause}"
        + result.stderr.split(cause, 1)[1].splitlines()[0]
    ]
    assert "uninstall torch-npu to run on CPU/CUDA" in result.stderr and "torch_npu is not importable" not in result.stderr


@pytest.mark.slow
def test_our_patched_framework_raises_a_dit4dit_error_when_imported_with_a_broken_torch_npu(tmp_path):
    """Imported (not run), the patched module raises; in this repository the error is a DiT4DiTError."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "DiT4DiT", tree / "DiT4DiT", ignore=shutil.ignore_patterns("__pycache__"))
    assert subprocess.run(["git", "apply", str(PATCH)], cwd=tree, capture_output=True).returncode == 0
    probe = ("from DiT4DiT.errors import DiT4DiTError\n"
             "try:\n    import DiT4DiT.model.framework.DiT4DiT\n"
             "except DiT4DiTError as error:\n    print(type(error).__name__, error.exit_code, repr(error.__cause__))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TORCH_NPU), str(tree)]),
           "FAKE_TORCH_NPU_BROKEN": "transfer_to_npu"}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tree, capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.stdout.strip() == "TorchNpuImportError 1 ModuleNotFoundError(\"No module named 'setuptools'\")", result.stderr


@pytest.mark.slow
def test_patched_real_tree_with_fakes(zygote, tmp_path, tiny_pipeline_dir, tiny_robotwin_root):
    """Our own train.py and DiT4DiT.py, patched with the checked-in patch, train two steps with the fakes."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "DiT4DiT", tree / "DiT4DiT", ignore=shutil.ignore_patterns("__pycache__"))
    applied = subprocess.run(["git", "apply", str(PATCH)], cwd=tree, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    report, result = run_patched(
        zygote, tmp_path, tree, [TORCH_NPU, MX_V2],
        "--config_yaml", "DiT4DiT/config/tiny/dit4dit_tiny.yaml",
        f"--framework.cosmos25.base_model={tiny_pipeline_dir}",
        f"--datasets.vla_data.data_root_dir={tiny_robotwin_root}",
        f"--run_root_dir={tmp_path / 'runs'}", "--run_id=fakes",
        "--trainer.max_train_steps=2", "--trainer.save_interval=2", "--trainer.num_warmup_steps=1",
        "--trainer.logging_frequency=1", "--trainer.eval_interval=2", "--trainer.mixed_precision=bf16",
        "--trainer.profile_steps=2",
    )
    assert report["exit"] == 0, result.stderr[-3000:]
    # trainer.profile_steps went through torch_npu.profiler: its output folder, and the table read from it.
    profile = tmp_path / "runs" / "fakes" / "profile"
    assert [p.name for p in profile.glob("rank0_*_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv")]
    assert "top operators of steps 2-2 by self time:" in result.stderr and "(AI_CORE)" in result.stderr
    assert report["transfer_to_npu"]
    # bf16 is asked for, but the fake has no NPU device (torch.cuda.is_available(), which the real transfer_to_npu
    # maps to NPU availability, is False): every autocast site stays off instead of warning on each step.
    assert report["autocast"] == {}
    assert report["adamw_fused"] == [True]
    assert report["patcher_calls"] == DEFAULT_V2
    assert "torch_npu is not importable" not in result.stderr
    records = [json.loads(line) for line in (tmp_path / "runs" / "fakes" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "total_loss" in r] == [1, 2]


@pytest.mark.slow
def test_ci_script_explains_a_patch_that_no_longer_applies(tmp_path):
    """scripts/ci_patched_smoke.sh on a HEAD whose train.py changed under a hunk: names the hunk, says how to fix."""
    repo = tmp_path / "repo"
    for part in ("DiT4DiT", "scripts", "patches"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    train = repo / TRAIN
    text = train.read_text()
    assert "\nimport torch\n" in text  # the line the first hunk's context starts after
    train.write_text(text.replace("\nimport torch\n", "\nimport torch as torch\n", 1))
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    result = subprocess.run(
        ["bash", str(repo / "scripts" / "ci_patched_smoke.sh")], capture_output=True, text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert result.returncode == 1
    assert f"error: patch failed: {TRAIN}:" in result.stderr
    assert "regenerate it from the unpatched tree with: python scripts/port_to_npu.py . --emit-patch patches/dit4dit_npu.patch" in result.stderr
    assert "smoke run" not in result.stdout
