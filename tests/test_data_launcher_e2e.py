"""End to end through the real launcher: datasets fresh from lerobot (no modality.json, any folder name) given by
path or by a mixture file train 3 steps, and their folders stay byte-for-byte unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.fixtures_data import make_read_only, snapshot

ROOT = Path(__file__).resolve().parents[1]


def train_3_steps(tmp_path: Path, model: Path, *options: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "HCCL_", "DIT4DIT_"))}
    env.update(PYTHON=sys.executable, PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    command = ["bash", str(ROOT / "scripts" / "train_8p.sh"), "--max_train_steps=3", "--trainer.save_interval=3",
               "--trainer.num_warmup_steps=1", f"--base_model={model}", f"--run_root_dir={tmp_path / 'runs'}",
               "--run_id=fresh", f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}", *options]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _trained(result: subprocess.CompletedProcess, tmp_path: Path) -> str:
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    log = (tmp_path / "runs" / "fresh" / "train.log").read_text()
    assert (tmp_path / "runs" / "fresh" / "final_model" / "pytorch_model.pt").is_file()
    return log


@pytest.mark.slow
def test_a_lerobot_v3_dataset_by_path_trains_and_stays_unchanged(tmp_path, tiny_pipeline_dir):
    dataset = generate_lerobot("robotwin", tmp_path / "data" / "my bimanual set 2026", episodes_per_file=2)
    make_read_only(dataset)
    before = snapshot(dataset)
    log = _trained(train_3_steps(tmp_path, tiny_pipeline_dir, f"--data_mix={dataset}", "--data_config=robotwin"),
                   tmp_path)
    assert snapshot(dataset) == before
    assert f"dataset {dataset}: LeRobot v3.0, 3 episodes" in log and "modality derived for robotwin" in log


@pytest.mark.slow
def test_a_mixture_file_of_two_data_configs_trains_and_stays_unchanged(tmp_path, tiny_pipeline_dir):
    franka = generate_lerobot("libero_franka", tmp_path / "data" / "franka")
    arm = generate_lerobot("SO101", tmp_path / "data" / "so101 arm", version="v2.1", images=True)
    mixture = tmp_path / "mixture.yaml"
    mixture.write_text("- {path: data/franka, weight: 1.0, data_config: libero_franka}\n"
                       "- {path: 'data/so101 arm', weight: 0.5, data_config: SO101}\n")
    for folder in (franka, arm):
        make_read_only(folder)
    before = snapshot(tmp_path / "data")
    # LIBERO's sin/cos state is 16 wide.
    log = _trained(train_3_steps(tmp_path, tiny_pipeline_dir, f"--data_mix={mixture}",
                                 "--datasets.vla_data.max_state_dim=16", "--framework.action_model.state_dim=16"),
                   tmp_path)
    assert snapshot(tmp_path / "data") == before
    assert "data config libero_franka" in log and "data config SO101" in log and "primary_image 48x64 image" in log


@pytest.mark.slow
def test_the_preflight_names_a_data_mix_path_that_does_not_exist(tmp_path, tiny_pipeline_dir):
    result = train_3_steps(tmp_path, tiny_pipeline_dir, f"--data_mix={tmp_path / 'no_such_set'}", "--dry-run")
    assert result.returncode == 2
    assert f"{tmp_path / 'no_such_set'} does not exist; give a dataset folder" in result.stdout + result.stderr
