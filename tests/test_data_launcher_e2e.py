"""End to end through the real launcher: datasets fresh from lerobot (no modality.json, any folder name) given by
path or by a mixture file train 3 steps, and their folders stay byte-for-byte unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.fixtures_data import make_read_only, snapshot
from helpers.launcher_runs import launch, plan


def options_3_steps(tmp_path: Path, model: Path, *options: str) -> list[str]:
    return ["--max_train_steps=3", "--trainer.save_interval=3", "--trainer.num_warmup_steps=1", f"--base_model={model}",
            f"--run_root_dir={tmp_path / 'runs'}", "--run_id=fresh", f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}",
            *options]


def _trained(result, run_dir: Path) -> str:
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (run_dir / "final_model" / "pytorch_model.pt").is_file()
    return (run_dir / "train.log").read_text()


@pytest.mark.slow
@pytest.mark.xdist_group("launcher_run")  # shares the session's one launcher training
def test_a_lerobot_v3_dataset_by_path_trains_and_stays_unchanged(launcher_run):
    result, run_dir, dataset, before = launcher_run  # the session's one launch (--data_mix=PATH --data_config=robotwin)
    log = _trained(result, run_dir)
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
    result = launch(*options_3_steps(tmp_path, tiny_pipeline_dir, f"--data_mix={mixture}",
                                     "--datasets.vla_data.max_state_dim=16", "--framework.action_model.state_dim=16"),
                    timeout=900)
    log = _trained(result, tmp_path / "runs" / "fresh")
    assert snapshot(tmp_path / "data") == before
    assert "data config libero_franka" in log and "data config SO101" in log and "primary_image 48x64 image" in log


def test_the_preflight_names_a_data_mix_path_that_does_not_exist(tmp_path, tiny_pipeline_dir):
    result = plan(*options_3_steps(tmp_path, tiny_pipeline_dir, f"--data_mix={tmp_path / 'no_such_set'}", "--dry-run"))
    assert result.returncode == 2
    assert f"{tmp_path / 'no_such_set'} does not exist; give a dataset folder" in result.stdout + result.stderr
