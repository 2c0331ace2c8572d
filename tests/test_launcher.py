"""scripts/train_8p.sh, run for real: a fake `npu-smi` (tests/fakes/bin) plays an A2 node, an A3 node or
no NPU at all; everything else (bash, Python, accelerate launch, the trainer) is the real thing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "scripts" / "train_8p.sh"
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"
PATCH_MARK = "from torch_npu.contrib import transfer_to_npu"


def host_path() -> str:
    """PATH without any real npu-smi, with the test interpreter's bin first."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(FAKE_BIN)]
    dirs = [str(Path(sys.executable).parent)] + [d for d in dirs if not (Path(d) / "npu-smi").exists()]
    return os.pathsep.join(dirs)


def launch(*args: str, layout: str | None = None, env: dict | None = None, timeout: int = 120):
    """Run the launcher; layout a2/a3 puts the fake npu-smi on PATH, None makes a CPU host."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_", "TORCH_HCCL", "DIT4DIT_"))}
    full_env.update(PYTHON=sys.executable, PATH=host_path())
    if layout is not None:
        full_env.update(PATH=f"{FAKE_BIN}{os.pathsep}{full_env['PATH']}", FAKE_NPU_SMI_LAYOUT=layout)
    full_env.update(env or {})
    return subprocess.run(["bash", str(LAUNCHER), *args], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def model_skeleton(tmp_path) -> Path:
    """A pipeline folder with every file the completeness check looks for (its contents are never loaded)."""
    root = tmp_path / "model"
    root.mkdir()
    (root / "model_index.json").write_text(json.dumps({"_class_name": "Cosmos2_5_PredictBasePipeline"}))
    files = {"text_encoder": "config.json", "tokenizer": "tokenizer_config.json", "transformer": "config.json",
             "vae": "config.json", "scheduler": "scheduler_config.json"}
    for part, config in files.items():
        (root / part).mkdir()
        (root / part / config).write_text("{}")
        if part in ("text_encoder", "transformer", "vae"):
            (root / part / "model.safetensors").write_bytes(b"\x02" + bytes(7) + b"{}")  # a valid empty file
    return root


@pytest.fixture
def data_skeleton(tmp_path) -> Path:
    root = tmp_path / "data"
    (root / "adjust_bottle" / "meta").mkdir(parents=True)
    (root / "adjust_bottle" / "meta" / "info.json").write_text("{}")
    return root


@pytest.fixture
def npu_ready(tmp_path, model_skeleton, data_skeleton):
    """Arguments and environment that pass every NPU preflight check this host can pass."""
    set_env = tmp_path / "cann" / "set_env.sh"
    set_env.parent.mkdir()
    # Stands in for CANN's set_env.sh, written like the vendor's (unset variables, no strict mode).
    set_env.write_text(f'export ASCEND_HOME_PATH={set_env.parent}\nexport LD_LIBRARY_PATH=$ASCEND_HOME_PATH/lib64:$LD_LIBRARY_PATH\n')
    entry = tmp_path / "patched_train.py"
    entry.write_text(f"{PATCH_MARK}\n")
    args = [f"--base_model={model_skeleton}", f"--data_root_dir={data_skeleton}", "--data_mix=robotwin_task1"]
    return args, {"CANN_SET_ENV": str(set_env), "DIT4DIT_TRAIN_ENTRY": str(entry)}


def env_lines(stdout: str) -> dict[str, str]:
    block = stdout.split("environment:\n", 1)[1].split("command", 1)[0]
    return dict(line.strip().split("=", 1) for line in block.splitlines())


@pytest.mark.parametrize("layout, devices", [("a2", 8), ("a3", 16)])
def test_dry_run_on_npu_host_shows_ascend_environment_and_command(layout, devices, npu_ready, tmp_path):
    args, env = npu_ready
    result = launch("--dry-run", "--max_train_steps=100", "--per_device_batch_size=1", "--trainer.save_interval", "50",
                    "--action_video_freq_ratio", "2", *args, layout=layout, env=env)
    out = result.stdout
    assert f"host: npu ({layout.upper()}, {devices} of {devices} devices visible); CANN: {env['CANN_SET_ENV']}" in out
    variables = env_lines(out)
    assert variables["TASK_QUEUE_ENABLE"] == "2" and variables["CPU_AFFINITY_CONF"] == "1"
    assert variables["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert variables["WANDB_MODE"] == "offline"
    assert variables["HCCL_CONNECT_TIMEOUT"] == "1200" and variables["HCCL_EXEC_TIMEOUT"] == "1800"
    assert ("TORCH_HCCL_ZERO_COPY" in variables) == (layout == "a3")
    torch_lib = str(Path(__import__("torch").__file__).parent / "lib")
    ld_path = variables["LD_LIBRARY_PATH"].split(":")
    assert ld_path[0] == torch_lib and str(tmp_path / "cann" / "lib64") in ld_path  # ours first, CANN's kept
    command = out.split("command (in", 1)[1].splitlines()[1]
    assert "-m accelerate.commands.launch --config_file DiT4DiT/config/deepseeds/deepspeed_zero2.yaml" in command
    assert f"--num_processes {devices} {env['DIT4DIT_TRAIN_ENTRY']}" in command
    for item in ("--config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml", "--trainer.max_train_steps=100",
                 "--datasets.vla_data.per_device_batch_size=1", "--datasets.vla_data.data_mix=robotwin_task1",
                 "--framework.name=DiT4DiT", "--datasets.vla_data.action_video_freq_ratio=2",
                 "--trainer.save_interval=50"):
        assert item in command
    # torch_npu is never installed here, so that is the one thing preflight can still report.
    assert result.returncode == 2
    assert "preflight: 1 problem(s)" in result.stderr and "torch_npu is not installed" in result.stderr


def test_a_short_npu_run_saves_at_its_end_by_default(npu_ready):
    # The robotwin config saves every 10000 steps; a 100-step run must not be refused for that.
    args, env = npu_ready
    command = launch("--dry-run", "--max_train_steps=100", *args, layout="a2", env=env).stdout
    assert "--trainer.save_interval=100 " in command + " "
    command = launch("--dry-run", "--max_train_steps=50000", *args, layout="a2", env=env).stdout
    assert "--trainer.save_interval=10000 " in command + " "


def test_zero_copy_follows_the_soc_override(npu_ready):
    args, env = npu_ready
    forced_a3 = launch("--dry-run", "--soc=a3", *args, layout="a2", env=env)
    assert env_lines(forced_a3.stdout)["TORCH_HCCL_ZERO_COPY"] == "1"
    on_a2 = launch("--dry-run", *args, layout="a2", env={**env, "TORCH_HCCL_ZERO_COPY": "1"})
    assert "TORCH_HCCL_ZERO_COPY" not in env_lines(on_a2.stdout)
    assert "unsetting TORCH_HCCL_ZERO_COPY" in on_a2.stderr


def test_unpatched_tree_is_refused_with_the_command_that_patches_it(npu_ready, tmp_path):
    args, env = npu_ready
    plain = tmp_path / "plain_train.py"
    plain.write_text("import torch\n")
    result = launch("--dry-run", *args, layout="a3", env={**env, "DIT4DIT_TRAIN_ENTRY": str(plain)})
    assert result.returncode == 2
    assert "run  git apply patches/dit4dit_npu.patch" in result.stderr


@pytest.mark.parametrize("layout, visible_env, asked, visible", [
    ("a2", None, 16, 8),
    ("a3", None, 32, 16),
    ("a3", "0,1,2,3", 8, 4),
])
def test_too_many_processes_is_refused_before_anything_starts(layout, visible_env, asked, visible, npu_ready, tmp_path):
    args, env = npu_ready
    marker = tmp_path / "started"
    entry = tmp_path / "train.py"
    entry.write_text(f"{PATCH_MARK}\nopen({str(marker)!r}, 'w').close()\n")
    env = {**env, "DIT4DIT_TRAIN_ENTRY": str(entry)}
    if visible_env:
        env["ASCEND_RT_VISIBLE_DEVICES"] = visible_env
    result = launch(f"--num_processes={asked}", f"--run_root_dir={tmp_path / 'runs'}", *args, layout=layout, env=env)
    assert result.returncode == 2
    assert f"--num_processes={asked} but only {visible} NPU devices are visible" in result.stderr
    assert "an Atlas 800T A3 node has 16 devices" in result.stderr
    assert not marker.exists() and not (tmp_path / "runs").exists()


def test_cpu_host_dry_run_uses_tiny_defaults_and_says_how_to_make_them(tmp_path):
    result = launch("--dry-run", layout=None, env={"CANN_SET_ENV": "/nonexistent"})
    assert "host: cpu" in result.stdout
    assert set(env_lines(result.stdout)) == {"WANDB_MODE", "PYTHONPATH"}  # no Ascend variables
    command = result.stdout.split("command (in", 1)[1].splitlines()[1]
    assert "--config_file DiT4DiT/config/deepseeds/cpu.yaml --num_processes 1 DiT4DiT/training/train.py" in command
    assert "--config_yaml DiT4DiT/config/tiny/dit4dit_tiny.yaml" in command
    assert "--trainer.freeze_modules" not in command  # not given: the YAML decides
    model = ROOT / "playground/Pretrained_models/Cosmos-Predict2.5-tiny"
    if not (model / "model_index.json").is_file():
        assert result.returncode == 2
        assert "fix: python -m DiT4DiT.tools.tiny_cosmos --out ./playground/Pretrained_models/Cosmos-Predict2.5-tiny" in result.stderr


def test_bad_options_are_usage_errors():
    unknown = launch("--num_proceses=2", layout=None)
    assert unknown.returncode == 2 and "unknown option --num_proceses" in unknown.stderr
    bad_int = launch("--max_train_steps=ten", layout=None)
    assert bad_int.returncode == 2 and "--max_train_steps=ten: expected a positive integer" in bad_int.stderr
    helped = launch("--help", layout=None)
    assert helped.returncode == 0 and "--num_processes=N" in helped.stdout and "--dry-run" in helped.stdout


def test_failing_trainer_fails_the_launcher_and_is_logged(tmp_path, model_skeleton, data_skeleton):
    entry = tmp_path / "failing_train.py"
    entry.write_text("import sys\nprint('fake trainer ran with', sys.argv[1:])\nsys.exit(3)\n")
    runs = tmp_path / "runs"
    result = launch(f"--base_model={model_skeleton}", f"--data_root_dir={data_skeleton}", f"--run_root_dir={runs}",
                    "--run_id=failing", layout=None, env={"DIT4DIT_TRAIN_ENTRY": str(entry)}, timeout=300)
    # accelerate launch reports any rank's failure as its own non-zero status; tee's 0 must not replace it.
    assert result.returncode == 1, result.stderr[-2000:]
    assert "training failed (exit code 1" in result.stderr
    log = (runs / "failing" / "train.log").read_text()
    assert "fake trainer ran with" in log and f"--run_root_dir={runs}" in log
    assert "exitcode: 3" in log and log.rstrip().endswith("=== exit code 1")


@pytest.mark.skipif(not (ROOT / "DiT4DiT/training/train.py").exists(), reason="the trainer is not written yet")
def test_cpu_host_really_trains_the_tiny_config(tmp_path, request):
    model = request.getfixturevalue("tiny_pipeline_dir")
    data = request.getfixturevalue("tiny_robotwin_root")
    runs = tmp_path / "runs"
    result = launch("--max_train_steps=3", "--trainer.save_interval=3", "--trainer.num_warmup_steps=1", f"--base_model={model}", f"--data_root_dir={data}",
                    f"--run_root_dir={runs}", "--run_id=tiny", layout=None, timeout=900)
    run_dir = runs / "tiny"
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (run_dir / "train.log").read_text().rstrip().endswith("=== exit code 0")
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "final_model" / "pytorch_model.pt").is_file()

