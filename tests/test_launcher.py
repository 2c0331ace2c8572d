"""scripts/train_8p.sh: a fake `npu-smi` (tests/fakes/bin) plays an A2 node, an A3 node or no NPU at all.

What the script runs for real (slow): its dry run, a refusal before anything starts, the log, a failing and a real
trainer, signals, relative paths. What it only prints or refuses comes from the planner it runs first, and is
checked by calling that planner in this process (`plan`) with the environment the script gives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.launcher_runs import LAUNCHER, ROOT, host_path, launch, plan

PATCH_MARK = "from torch_npu.contrib import transfer_to_npu"


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
    """The dry-run's environment block: variable -> value (without its "  (source)"); not the `unset NAME` lines."""
    block = stdout.split("environment:\n", 1)[1].split("command", 1)[0]
    return dict(line.strip().rsplit("  (", 1)[0].split("=", 1) for line in block.splitlines()
                if not line.strip().startswith("unset "))


def unset_lines(stdout: str) -> dict[str, str]:
    """The dry-run's `unset NAME  (why)` lines: variable -> why."""
    block = stdout.split("environment:\n", 1)[1].split("command", 1)[0]
    return {line.split()[1]: line.split("  (", 1)[1][:-1] for line in block.splitlines() if line.strip().startswith("unset ")}


@pytest.mark.parametrize("layout, devices", [("a2", 8), ("a3", 16)])
def test_dry_run_on_npu_host_shows_ascend_environment_and_command(layout, devices, npu_ready, tmp_path):
    args, env = npu_ready
    result = plan("--dry-run", "--max_train_steps=100", "--per_device_batch_size=1", "--trainer.save_interval", "50",
                    "--action_video_freq_ratio", "2", *args, layout=layout, env=env)
    out = result.stdout
    assert f"host: npu ({layout.upper()}, {devices} of {devices} devices visible); CANN: {env['CANN_SET_ENV']}" in out
    assert f"detected: npu-smi lists {devices} devices ({layout.upper()}, detected)" in out
    assert f"python: {sys.version.split()[0]} ({sys.executable})" in out
    variables = env_lines(out)
    assert variables["TASK_QUEUE_ENABLE"] == "2" and variables["CPU_AFFINITY_CONF"] == "1"
    assert variables["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert variables["WANDB_MODE"] == "offline"
    assert variables["HCCL_CONNECT_TIMEOUT"] == "1200" and variables["HCCL_EXEC_TIMEOUT"] == "540"
    assert "TORCH_HCCL_ZERO_COPY" not in variables  # off unless asked for
    assert ("TORCH_HCCL_ZERO_COPY" in unset_lines(out)) == (layout == "a3")
    torch_lib = str(Path(__import__("torch").__file__).parent / "lib")
    ld_path = variables["LD_LIBRARY_PATH"].split(":")
    assert ld_path[0] == torch_lib and ld_path[-1] == "$LD_LIBRARY_PATH"  # ours first, CANN's kept
    command = out.split("command (in", 1)[1].splitlines()[1]
    assert "-m accelerate.commands.launch --config_file DiT4DiT/config/deepseeds/deepspeed_zero2.yaml" in command
    assert f"--num_processes {devices} {env['DIT4DIT_TRAIN_ENTRY']}" in command
    for item in ("--config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml", "--trainer.max_train_steps=100",
                 "--datasets.vla_data.per_device_batch_size=1", "--datasets.vla_data.data_mix=robotwin_task1",
                 "--datasets.vla_data.action_video_freq_ratio=2",
                 "--trainer.save_interval=50"):
        assert item in command
    # torch_npu is never installed here, so that is the one thing preflight can still report.
    assert result.returncode == 2
    assert "preflight: 1 problem(s)" in result.stderr and "torch_npu is not installed" in result.stderr


def forwarded(stdout: str) -> list[str]:
    """The trainer arguments after `--config_yaml FILE` in the dry-run command."""
    command = stdout.split("command (in", 1)[1].splitlines()[1].split()
    return command[command.index("--config_yaml") + 2:]


def values(stdout: str) -> dict[str, str]:
    """The dry-run's value block: key -> "value  (source)"."""
    block = stdout.split("values:\n", 1)[1].split("environment:", 1)[0]
    return dict(line.strip().split("=", 1) for line in block.splitlines())


def test_npu_host_passes_only_what_was_typed_and_says_where_each_value_comes_from(npu_ready, tmp_path):
    args, env = npu_ready
    out = plan("--dry-run", "--max_train_steps=100", "--seed=1", *args, layout="a3", env=env).stdout
    model, data = args[0].split("=", 1)[1], args[1].split("=", 1)[1]
    # Short names first (in the launcher's option order), then the keys passed through as typed.
    assert forwarded(out) == ["--trainer.max_train_steps=100", "--datasets.vla_data.data_mix=robotwin_task1",
                              f"--datasets.vla_data.data_root_dir={data}", f"--framework.cosmos25.base_model={model}",
                              "--seed=1"]
    yaml = "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"
    shown = values(out)
    assert shown["config_yaml"] == f"{yaml}  (host default: npu)"
    assert shown["launch_config"] == "DiT4DiT/config/deepseeds/deepspeed_zero2.yaml  (host default: npu)"
    assert shown["num_processes"] == "16  (host default: npu)"
    assert shown["trainer.max_train_steps"] == "100  (option --max_train_steps)"
    assert shown["seed"] == "1  (option --seed)"
    assert shown["run_id"] == f"dit4dit_robotwin  (yaml {yaml})"
    assert shown["datasets.vla_data.data_mix"] == "robotwin_task1  (option --data_mix)"
    assert "log: ./runs/dit4dit_robotwin/train.log" in out


def test_the_yaml_decides_what_was_not_typed(npu_ready):
    # The robotwin YAML holds the NPU defaults the launcher used to pass (100000 steps, batch 4, saves every 10000).
    args, env = npu_ready
    out = plan("--dry-run", *args, layout="a2", env=env).stdout
    assert not any(item.startswith(("--trainer.", "--run_id", "--framework.name")) for item in forwarded(out))
    from DiT4DiT.config.schema import load_config
    cfg = load_config(ROOT / "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml", [])
    assert (cfg.trainer.max_train_steps, cfg.trainer.save_interval, cfg.datasets.vla_data.per_device_batch_size) == (100000, 10000, 4)


def test_zero_copy_is_off_on_an_a3_node_until_asked_for(npu_ready):
    args, env = npu_ready
    one_a3 = plan("--dry-run", *args, layout="a3", env=env)
    assert "TORCH_HCCL_ZERO_COPY" not in env_lines(one_a3.stdout)
    assert unset_lines(one_a3.stdout)["TORCH_HCCL_ZERO_COPY"] == (
        "off by default: a trial feature of CANN 9.0's HCCL, not for production; ask with --hccl_zero_copy=1 or "
        "export TORCH_HCCL_ZERO_COPY=1 after an A/B run (docs/ascend.md)")
    asked = plan("--dry-run", "--hccl_zero_copy=1", *args, layout="a3", env=env)
    assert "  TORCH_HCCL_ZERO_COPY=1  (option --hccl_zero_copy=1)" in asked.stdout
    assert "not for production; compare loss and grad norm over a few steps with it off first" in asked.stderr
    exported = plan("--dry-run", *args, layout="a3", env={**env, "TORCH_HCCL_ZERO_COPY": "1"})
    assert "  TORCH_HCCL_ZERO_COPY=1  (yours)" in exported.stdout
    overruled = plan("--dry-run", "--hccl_zero_copy=0", *args, layout="a3", env={**env, "TORCH_HCCL_ZERO_COPY": "1"})
    assert unset_lines(overruled.stdout)["TORCH_HCCL_ZERO_COPY"] == "option --hccl_zero_copy=0"
    forced_a3 = plan("--dry-run", "--soc=a3", "--hccl_zero_copy=1", *args, layout="a2", env=env)
    assert env_lines(forced_a3.stdout)["TORCH_HCCL_ZERO_COPY"] == "1"
    on_a2 = plan("--dry-run", *args, layout="a2", env={**env, "TORCH_HCCL_ZERO_COPY": "1"})
    assert "TORCH_HCCL_ZERO_COPY" not in env_lines(on_a2.stdout) and unset_lines(on_a2.stdout)["TORCH_HCCL_ZERO_COPY"] == "A2"
    assert "unsetting TORCH_HCCL_ZERO_COPY" in on_a2.stderr
    refused = plan("--dry-run", "--hccl_zero_copy=1", *args, layout="a2", env=env)
    assert refused.returncode == 2 and "--hccl_zero_copy=1: zero-copy collectives are A3-only" in refused.stderr


def test_deterministic_key_exports_the_collectives_variable(npu_ready):
    args, env = npu_ready
    default = plan("--dry-run", *args, layout="a3", env=env)
    assert "HCCL_DETERMINISTIC" not in env_lines(default.stdout)
    assert "  trainer.deterministic=False  (yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml)" in default.stdout \
        or "  trainer.deterministic=False  (default)" in default.stdout
    on = plan("--dry-run", "--trainer.deterministic=true", *args, layout="a3", env=env)
    assert "  HCCL_DETERMINISTIC=true  (trainer.deterministic)" in on.stdout
    assert "  trainer.deterministic=True  (option --trainer.deterministic)" in on.stdout
    assert "--trainer.deterministic=true" in on.stdout.split("command (in", 1)[1]


def test_unpatched_tree_is_refused_with_the_command_that_patches_it(npu_ready, tmp_path):
    args, env = npu_ready
    plain = tmp_path / "plain_train.py"
    plain.write_text("import torch\n")
    result = plan("--dry-run", *args, layout="a3", env={**env, "DIT4DIT_TRAIN_ENTRY": str(plain)})
    assert result.returncode == 2
    assert "run  git apply patches/dit4dit_npu.patch" in result.stderr


@pytest.mark.parametrize("layout, visible_env, asked, visible", [
    ("a2", None, 16, 8),
    ("a3", None, 32, 16),
    ("a3", "0,1,2,3", 8, 4),
])
def test_too_many_processes_is_refused(layout, visible_env, asked, visible, npu_ready, tmp_path):
    args, env = npu_ready
    if visible_env:
        env = {**env, "ASCEND_RT_VISIBLE_DEVICES": visible_env}
    result = plan(f"--num_processes={asked}", f"--run_root_dir={tmp_path / 'runs'}", *args, layout=layout, env=env)
    assert result.returncode == 2
    assert f"--num_processes={asked} per node but only {visible} NPU devices are visible on this node" in result.stderr
    assert "an Atlas 800T A3 node has 16 devices" in result.stderr


@pytest.mark.slow
def test_a_refused_launch_starts_nothing(npu_ready, tmp_path):
    args, env = npu_ready
    marker = tmp_path / "started"
    entry = tmp_path / "train.py"
    entry.write_text(f"{PATCH_MARK}\nopen({str(marker)!r}, 'w').close()\n")
    result = launch("--num_processes=16", f"--run_root_dir={tmp_path / 'runs'}", *args, layout="a2",
                    env={**env, "DIT4DIT_TRAIN_ENTRY": str(entry)})
    assert result.returncode == 2
    assert "--num_processes=16 per node but only 8 NPU devices are visible on this node" in result.stderr
    assert not marker.exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_cpu_host_dry_run_uses_tiny_defaults_and_says_how_to_make_them(tmp_path):
    result = launch("--dry-run", layout=None, env={"CANN_SET_ENV": "/nonexistent"})
    assert "host: cpu" in result.stdout and "detected: no npu-smi device, /dev/davinci* or torch_npu" in result.stdout
    assert set(env_lines(result.stdout)) == {"WANDB_MODE", "TORCH_WARM_POOL", "PYTHONPATH", "OMP_NUM_THREADS"}  # no Ascend variables
    command = result.stdout.split("command (in", 1)[1].splitlines()[1]
    assert "--config_file DiT4DiT/config/deepseeds/cpu.yaml --num_processes 1 DiT4DiT/training/train.py" in command
    assert "--config_yaml DiT4DiT/config/tiny/dit4dit_tiny.yaml" in command
    assert forwarded(result.stdout) == []  # nothing typed: the YAML decides everything
    model = ROOT / "playground/Pretrained_models/Cosmos-Predict2.5-tiny"
    if not (model / "model_index.json").is_file():
        assert result.returncode == 2
        assert "fix: python -m DiT4DiT.tools.tiny_cosmos --out playground/Pretrained_models/Cosmos-Predict2.5-tiny" in result.stderr


def test_bad_options_are_usage_errors():
    unknown = plan("--num_proceses=2", layout=None)
    assert unknown.returncode == 2 and "unknown option --num_proceses; did you mean --num_processes?" in unknown.stderr
    key = plan("--trainer.max_train_step=2", layout=None)
    assert key.returncode == 2 and "Did you mean 'trainer.max_train_steps'?" in key.stderr
    valueless = plan("--run_id", "--dry-run", layout=None)
    assert valueless.returncode == 2 and "--run_id needs a value: --run_id=VALUE" in valueless.stderr
    slash = plan("--run_id=a/b", layout=None)
    assert slash.returncode == 2 and "--run_id=a/b: use letters, digits" in slash.stderr
    bad_int = plan("--max_train_steps=ten", layout=None)
    assert bad_int.returncode == 2 and "--max_train_steps=ten: expected a positive integer" in bad_int.stderr
    helped = plan("--help", layout=None)
    assert helped.returncode == 0 and "processes PER NODE" in helped.stdout and "--dry-run" in helped.stdout


@pytest.mark.slow
def test_failing_trainer_fails_the_launcher_and_is_logged(tmp_path, model_skeleton, data_skeleton):
    entry = tmp_path / "failing_train.py"
    entry.write_text("import sys\nprint('fake trainer ran with', sys.argv[1:])\nsys.exit(3)\n")
    runs = tmp_path / "runs"
    result = launch(f"--base_model={model_skeleton}", f"--data_root_dir={data_skeleton}", "--data_mix=robotwin_task1",
                    f"--run_root_dir={runs}", "--run_id=failing", layout=None, env={"DIT4DIT_TRAIN_ENTRY": str(entry)}, timeout=300)
    # accelerate launch reports any rank's failure as its own non-zero status; tee's 0 must not replace it.
    assert result.returncode == 1, result.stderr[-2000:]
    assert "training failed (exit code 1" in result.stderr
    log = (runs / "failing" / "train.log").read_text()
    assert "fake trainer ran with" in log and f"--run_root_dir={runs}" in log
    assert "exitcode: 3" in log and log.rstrip().endswith("=== exit code 1")


@pytest.mark.slow
@pytest.mark.xdist_group("launcher_run")  # shares the session's one launcher training
def test_cpu_host_really_trains_the_tiny_config(launcher_run):
    result, run_dir, _, _ = launcher_run  # a numeric run_id stays a string all the way to the run dir
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (run_dir / "train.log").read_text().rstrip().endswith("=== exit code 0")
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.run_id == "20250101" and saved.seed == 7  # a top-level key passed through
    assert (run_dir / "final_model" / "pytorch_model.pt").is_file()


@pytest.mark.parametrize("per_node, status", [(16, 0), (17, 2)])
def test_device_check_is_per_node_and_accelerate_gets_the_total(per_node, status, npu_ready):
    args, env = npu_ready
    torch_npu_env = {**env, "PYTHONPATH": str(ROOT / "tests" / "fakes" / "torch_npu")}  # preflight finds torch_npu
    result = plan("--dry-run", f"--num_processes={per_node}", "--num_machines=2", "--machine_rank=1",
                    "--main_process_ip=10.0.0.1", *args, layout="a3", env=torch_npu_env)
    assert result.returncode == status, result.stderr
    assert "nodes: 2 (this is machine 1)" in result.stdout
    command = result.stdout.split("command (in", 1)[1].splitlines()[1]
    assert (f"--num_processes {2 * per_node} --num_machines 2 --machine_rank 1 --main_process_ip 10.0.0.1 "
            "--main_process_port 29500") in command
    if status:
        assert f"--num_processes={per_node} per node but only 16 NPU devices are visible on this node" in result.stderr


def test_scheduler_variables_set_the_nodes_and_options_win(npu_ready):
    args, env = npu_ready
    scheduler = {**env, "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "6000", "NNODES": "4", "NODE_RANK": "3"}
    out = plan("--dry-run", *args, layout="a3", env=scheduler).stdout
    assert "--num_machines 4 --machine_rank 3 --main_process_ip 10.0.0.7 --main_process_port 6000" in out
    assert values(out)["main_process_ip"] == "10.0.0.7  (MASTER_ADDR)"
    slurm = {**env, "SLURM_NNODES": "2", "SLURM_NODEID": "1", "MASTER_ADDR": "10.0.0.7"}
    out = plan("--dry-run", "--main_process_port=7000", *args, layout="a3", env=slurm).stdout
    assert "--num_machines 2 --machine_rank 1 --main_process_ip 10.0.0.7 --main_process_port 7000" in out
    assert values(out)["machine_rank"] == "1  (SLURM_NODEID)"
    no_ip = plan("--dry-run", "--num_machines=2", *args, layout="a3", env=env)
    assert no_ip.returncode == 2 and "2 machines need the address of machine 0: --main_process_ip=IP" in no_ip.stderr
    bad_rank = plan("--dry-run", "--num_machines=2", "--machine_rank=2", "--main_process_ip=h", layout=None)
    assert bad_rank.returncode == 2 and "machine_rank=2 (option --machine_rank): expected 0 to 1" in bad_rank.stderr


def test_network_interface_sets_gloo_and_hccl(npu_ready):
    args, env = npu_ready
    out = plan("--dry-run", "--net_if=lo", *args, layout="a3", env=env).stdout
    variables = env_lines(out)
    assert variables["GLOO_SOCKET_IFNAME"] == "lo" and variables["HCCL_SOCKET_IFNAME"] == "=lo"  # exact match
    assert variables["HCCL_IF_IP"] == "127.0.0.1"
    cpu = plan("--dry-run", layout=None, env={"DIT4DIT_NET_IF": "lo"}).stdout
    assert env_lines(cpu)["GLOO_SOCKET_IFNAME"] == "lo" and "HCCL_SOCKET_IFNAME" not in env_lines(cpu)
    missing = plan("--dry-run", "--net_if=nosuch0", layout=None)
    assert missing.returncode == 2 and "network interface nosuch0 (option --net_if) does not exist here" in missing.stderr


def test_npu_signs_without_npu_smi_are_refused_not_run_on_cpu():
    fake_torch_npu = {"PYTHONPATH": str(ROOT / "tests" / "fakes" / "torch_npu")}
    result = plan("--dry-run", layout=None, env=fake_torch_npu)
    assert result.returncode == 2
    assert "npu-smi is missing or lists no device (torch_npu is installed): make `npu-smi info` work here" in result.stderr
    assert "or pass --device=cpu" in result.stderr
    broken = plan("--dry-run", layout="broken", env=fake_torch_npu)  # npu-smi present but failing
    assert broken.returncode == 2 and "npu-smi is missing or lists no device" in broken.stderr


@pytest.mark.slow  # --device=cuda asks torch in a child process
def test_device_option_overrides_the_detection(npu_ready):
    args, env = npu_ready
    cpu = plan("--dry-run", "--device=cpu", layout="a3", env=env)
    assert "host: cpu" in cpu.stdout and "detected: --device=cpu" in cpu.stdout
    assert "--config_file DiT4DiT/config/deepseeds/cpu.yaml --num_processes 1" in cpu.stdout
    assert "TASK_QUEUE_ENABLE" not in env_lines(cpu.stdout)
    cuda = plan("--dry-run", "--device=cuda", *args, layout=None, env=env)
    assert "host: cuda (0 of 0 devices visible); Ascend environment skipped" in cuda.stdout
    assert "--config_file DiT4DiT/config/deepseeds/deepspeed_zero2.yaml" in cuda.stdout
    assert "--config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml" in cuda.stdout
    assert set(env_lines(cuda.stdout)) == {"WANDB_MODE", "TORCH_WARM_POOL", "PYTHONPATH"}
    assert cuda.returncode == 2 and "no CUDA device: torch sees no CUDA device" in cuda.stderr
    bad = plan("--device=tpu", layout=None)
    assert bad.returncode == 2 and "--device=tpu: expected one of npu, cuda, cpu" in bad.stderr


@pytest.mark.slow
def test_relative_paths_are_the_callers_for_options_and_path_keys(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    result = subprocess.run(["bash", str(LAUNCHER), "--dry-run", "--base_model=m", "--datasets.vla_data.cache_dir=c",
                             "--run_root_dir=r"], cwd=cwd, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHON": sys.executable, "PATH": host_path()})
    assert forwarded(result.stdout) == [f"--framework.cosmos25.base_model={cwd}/m", f"--run_root_dir={cwd}/r",
                                        f"--datasets.vla_data.cache_dir={cwd}/c"]
    assert f"log: {cwd}/r/dit4dit_tiny/train.log" in result.stdout


def test_the_launcher_runs_its_own_checkout_whatever_the_callers_folder_holds(tmp_path):
    """Called from inside another checkout (or beside an installed DiT4DiT), the script plans and runs the code of
    the checkout it belongs to: that is the tree the NPU patch was applied to."""
    other = tmp_path / "other_checkout"
    (other / "DiT4DiT" / "launch").mkdir(parents=True)
    (other / "DiT4DiT" / "__init__.py").write_text("")
    (other / "DiT4DiT" / "launch" / "__init__.py").write_text("")
    (other / "DiT4DiT" / "launch" / "__main__.py").write_text("import sys\nprint('the other checkout')\nsys.exit(3)\n")
    result = subprocess.run(["bash", str(LAUNCHER), "--help"], cwd=other, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHON": sys.executable, "PATH": host_path()})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "the other checkout" not in result.stdout and "--dry-run" in result.stdout


def test_python_older_than_3_10_is_refused():
    from DiT4DiT.launch.host_kind import python_problem

    assert python_problem((3, 9, 18)) == ("Python 3.9.18 is too old: this project needs Python 3.10 or 3.11 "
                                          "(PYTHON=/path/to/python3.10)")
    assert python_problem((3, 10, 0)) == "" and python_problem((3, 11, 7)) == ""


@pytest.mark.slow
def test_sigterm_reaches_the_trainer_and_the_launcher_waits_and_logs(tmp_path, model_skeleton, data_skeleton):
    entry = tmp_path / "slow_train.py"
    marks = tmp_path / "marks"
    entry.write_text(f"""import pathlib, signal, sys, time
marks = pathlib.Path({str(marks)!r})
def on_term(signum, frame):
    (marks / "got_sigterm").touch()
    time.sleep(3)  # a save in progress
    (marks / "saved").touch()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
marks.mkdir()
(marks / "started").touch()
time.sleep(120)
""")
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "DIT4DIT_"))}
    env.update(PYTHON=sys.executable, PATH=host_path(), DIT4DIT_TRAIN_ENTRY=str(entry))
    proc = subprocess.Popen(["bash", str(LAUNCHER), f"--base_model={model_skeleton}", f"--data_root_dir={data_skeleton}",
                             "--data_mix=robotwin_task1", f"--run_root_dir={runs}", "--run_id=sig"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (marks / "started").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (marks / "started").exists(), proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert (marks / "got_sigterm").exists() and (marks / "saved").exists()  # the launcher waited for the save
    log = (runs / "sig" / "train.log").read_text()
    assert log.rstrip().endswith(f"=== exit code {proc.returncode} (after SIGTERM, forwarded to the training process group)")
    assert "training failed" in stderr or proc.returncode == 0


def test_two_nodes_without_an_interface_use_the_route_to_machine_0_or_are_refused(npu_ready):
    args, env = npu_ready
    two = ["--dry-run", "--num_machines=2", "--main_process_ip=10.0.0.1", *args]
    routed = plan(*two, layout="a3", env={**env, "FAKE_IP_ROUTE_DEV": "lo"})  # the fake `ip` in tests/fakes/bin
    assert "network: lo (derived: `ip route get 10.0.0.1`), IPv4 127.0.0.1" in routed.stdout
    variables = env_lines(routed.stdout)
    assert variables["HCCL_SOCKET_IFNAME"] == "=lo" and variables["GLOO_SOCKET_IFNAME"] == "lo"
    assert "TORCH_HCCL_ZERO_COPY" not in variables and "TORCH_HCCL_ZERO_COPY" in unset_lines(routed.stdout)
    assert "timeouts: process group 600 s" in routed.stdout and variables["HCCL_EXEC_TIMEOUT"] == "540"
    refused = plan(*two, layout="a3", env={**env, "FAKE_IP_ROUTE": "none"})
    assert refused.returncode == 2
    assert ("2 machines need the network interface for collectives: pass --net_if=NAME (or DIT4DIT_NET_IF=NAME); "
            "`ip route get 10.0.0.1` names no interface (RTNETLINK answers: Network is unreachable)") in refused.stderr


def test_a_launch_config_beyond_the_yaml_bounds_is_refused_before_anything_reads_it_whole(tmp_path):
    # A 3 GB sparse --launch_config was read whole (the memory plan's ZeRO stage, then accelerate).
    with open(tmp_path / "huge.yaml", "wb") as huge:
        huge.truncate(3 * 2**30)
    result = plan("--dry-run", f"--launch_config={tmp_path / 'huge.yaml'}", layout=None)
    assert result.returncode == 2, result.stderr
    assert "huge.yaml: 3,221,225,472 bytes, more than the 4 MiB a launch config (an accelerate config file) may have" \
        in result.stderr
    (tmp_path / "list.yaml").write_text("- a\n")
    listed = plan("--dry-run", f"--launch_config={tmp_path / 'list.yaml'}", layout=None)
    assert listed.returncode == 2 and "list.yaml: the file is a list" in listed.stderr
