"""The README's commands work as written: its "Training on your data" command in an environment built the way
the Makefile builds .venv (dependencies, then the package installed editable), without PYTHONPATH."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.cli_runs import run_tree

pytestmark = pytest.mark.slow  # a venv, make develop, then accelerate launch

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def readme_training_command() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Training on your data", 1)[1]
    # The section's accelerate command (the launcher's path command beside it is run by test_data_launcher_e2e).
    block = re.search(r"```bash\n(accelerate launch .*?)```", section, re.S).group(1)
    return shlex.split(block.replace("\\\n", " "))


def tiny_overrides(pipeline: Path, data: Path, run_root: Path) -> list[str]:
    """Every key of the tiny config as a --key=value override, then where the tiny assets and run go."""
    values = OmegaConf.to_container(OmegaConf.load(TINY_CONFIG))

    def flatten(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from flatten(value, f"{prefix}{key}.")
            else:
                yield f"--{prefix}{key}={json.dumps(value)}"  # JSON values are YAML: quoted "no" stays a string

    return [*flatten(values), f"--framework.cosmos25.base_model={pipeline}", f"--datasets.vla_data.data_root_dir={data}",
            f"--run_root_dir={run_root}", "--run_id=readme", "--trainer.max_train_steps=2", "--trainer.save_interval=2",
            "--trackers=[jsonl]", "--datasets.vla_data.num_workers=0", "--datasets.vla_data.data_mix=robotwin_task1"]


@pytest.fixture(scope="module")
def installed_env(tmp_path_factory) -> Path:
    """A fresh virtual environment set up as `make venv` sets up .venv: the dependencies (here: this test's own
    site-packages, by a .pth file, as there is no network), then `make develop`. Returns its bin folder."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    python = venv / "bin/python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    result = subprocess.run(["make", "-C", str(REPO), "develop", f"PY={python}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return venv / "bin"


def test_readme_training_command_runs_verbatim_with_tiny_overrides(installed_env, tiny_pipeline_dir,
                                                                   tiny_robotwin_root, tmp_path):
    command = readme_training_command()
    assert command[:2] == ["accelerate", "launch"] and "DiT4DiT/training/train.py" in command
    # On this CPU host: the CPU launch configuration and one process instead of DeepSpeed on 8 devices.
    launch = command.index("--config_file")
    command[launch + 1] = "DiT4DiT/config/deepseeds/cpu.yaml"
    command[command.index("--num_processes") + 1] = "1"
    # `accelerate` is the environment's own (the module its console script runs).
    command[:2] = [str(installed_env / "python"), "-m", "accelerate.commands.launch"]
    command += tiny_overrides(tiny_pipeline_dir, tiny_robotwin_root, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(WANDB_MODE="offline", OMP_NUM_THREADS="1", PATH=f"{installed_env}{os.pathsep}{env['PATH']}")
    result = run_tree(command, cwd=REPO, env=env, timeout=900)
    assert "ModuleNotFoundError" not in result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "readme/final_model/pytorch_model.pt").is_file()
