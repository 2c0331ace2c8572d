"""Every normalisation kind resumes: a run continued from a saved state ends bitwise where an uninterrupted one ends.
So does a run with training-time real-time chunking (its delays are drawn per example).

The saved dataset_statistics.json is what a resumed run normalises with (training/resume.py); it must rebuild the
normalisers as a fresh start does, sin/cos key widths included (every LIBERO, RoboCasa GR1 and G1 run). One
in-process run per kind, resumed from its earlier state as a kill after that save leaves it; then, for sin/cos,
the kill -9 and SIGTERM sweep through a real `accelerate launch`, as tests/test_long_runs.py does for RoboTwin.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.cli_runs import kill_tree
from helpers.training_runs import ROOT, environment, metrics, train, train_in_process, trainer_command

pytestmark = pytest.mark.slow  # trainings, in-process and through accelerate launch

# A data config normalising everything by mean and std: no data config of the original does, so this one is SO101's
# keys with mean_std, registered for the test.
MEAN_STD = "SO101_mean_std"
KINDS = {  # normalisation kind -> data config whose state (and actions) use it
    "min_max": "SO101",
    "q99": "oxe_bridge",
    "mean_std": MEAN_STD,
    "sincos": "libero_franka",
}


def _mean_std_config():
    so101 = DATA_CONFIGS["SO101"]
    return dataclasses.replace(so101, name=MEAN_STD, normalization={k: "mean_std" for k in so101.normalization})


def data_overrides(dataset: Path, data_config: str) -> tuple[str, ...]:
    """The tiny config on one dataset given by path; 16-wide states (sin/cos doubles LIBERO's 8 values)."""
    return (f"--datasets.vla_data.data_mix={dataset}", f"--datasets.vla_data.data_config={data_config}",
            "--datasets.vla_data.max_state_dim=16", "--framework.action_model.state_dim=16",
            "--datasets.vla_data.holdout_episodes=1")


SIX_STEPS = ("--trainer.max_train_steps=6", "--trainer.save_interval=3", "--trainer.logging_frequency=1",
             "--trainer.eval_interval=2", "--trainer.num_warmup_steps=2")


def losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["total_loss"]) for r in metrics(run_dir) if "total_loss" in r]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final_model/pytorch_model.pt", weights_only=True)


def assert_ends_equal(resumed: Path, straight: Path) -> None:
    a, b = final_weights(straight), final_weights(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert losses(resumed) == losses(straight)


def as_killed_after(run_dir: Path, step: int) -> None:
    """What a kill -9 after the save at `step` leaves: no later state, weights or final model."""
    for path in run_dir.glob("checkpoints/steps_*"):
        if int(path.name.split("_")[1]) > step:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    shutil.rmtree(run_dir / "final_model")


def assert_resumes_to_the_same_end(tiny_pipeline_dir, tmp_path: Path, overrides) -> None:
    """runs/straight, killed after its save at step 3 and resumed, ends bitwise where it ended."""
    shutil.copytree(tmp_path / "runs/straight", tmp_path / "runs/killed")
    as_killed_after(tmp_path / "runs/killed", 3)
    resumed = train_in_process(tiny_pipeline_dir, tmp_path, tmp_path / "runs", "killed", *overrides,
                               "--trainer.is_resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 3" in resumed.stderr
    assert_ends_equal(tmp_path / "runs/killed", tmp_path / "runs/straight")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_normalisation_kind_resumes_bitwise(kind, tiny_pipeline_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(DATA_CONFIGS, MEAN_STD, _mean_std_config())
    data_config = KINDS[kind]
    dataset = generate_lerobot(data_config, tmp_path / "data" / kind, episodes=3, frames=(10, 14))
    overrides = (*data_overrides(dataset, data_config), *SIX_STEPS)
    straight = train_in_process(tiny_pipeline_dir, tmp_path, tmp_path / "runs", "straight", *overrides)
    assert straight.returncode == 0, straight.stderr[-3000:]
    statistics = json.loads((tmp_path / "runs/straight/dataset_statistics.json").read_text())
    tag = DATA_CONFIGS[data_config].embodiment_tag
    assert kind in statistics[tag]["state"]["normalization"]

    assert_resumes_to_the_same_end(tiny_pipeline_dir, tmp_path, overrides)


def test_a_run_with_training_time_rtc_resumes_bitwise(tiny_pipeline_dir, tmp_path):
    """Its per-example delays come from torch's CPU generator, which the saved state restores."""
    dataset = generate_lerobot("SO101", tmp_path / "data" / "so101", episodes=3, frames=(10, 14))
    rtc = ("--framework.action_model.rtc_training.enabled=true", "--framework.action_model.rtc_training.max_delay=3",
           "--framework.action_model.rtc_training.distribution=exponential")
    overrides = (*data_overrides(dataset, "SO101"), *SIX_STEPS, *rtc)
    straight = train_in_process(tiny_pipeline_dir, tmp_path, tmp_path / "runs", "straight", *overrides)
    assert straight.returncode == 0, straight.stderr[-3000:]
    plain = train_in_process(tiny_pipeline_dir, tmp_path, tmp_path / "runs", "plain",
                             *data_overrides(dataset, "SO101"), *SIX_STEPS)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert losses(tmp_path / "runs/plain") != losses(tmp_path / "runs/straight")  # the option is in force
    assert_resumes_to_the_same_end(tiny_pipeline_dir, tmp_path, overrides)


# --- sin/cos through accelerate launch: kill -9 and SIGTERM ----------------------------------------------

SWEEP_RUN = ("--trainer.max_train_steps=10", "--trainer.save_interval=5", "--trainer.eval_interval=4",
             "--trainer.logging_frequency=1", "--trainer.num_warmup_steps=2", "--datasets.vla_data.num_workers=1")


@pytest.fixture(scope="module")
def libero(tmp_path_factory, tiny_pipeline_dir) -> tuple[Path, tuple[str, ...], Path]:
    """A tiny libero_franka dataset, the sweep's overrides, and its uninterrupted run (read only by the tests)."""
    root = tmp_path_factory.mktemp("libero_sweep")
    dataset = generate_lerobot("libero_franka", root / "data" / "franka", episodes=3, frames=(12, 16))
    overrides = (*data_overrides(dataset, "libero_franka"), *SWEEP_RUN)
    result = train(tiny_pipeline_dir, root, root / "runs", "straight", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return dataset, overrides, root / "runs" / "straight"


def _started(tiny_pipeline_dir, root: Path, run_root: Path, run_id: str, overrides) -> subprocess.Popen:
    return subprocess.Popen(trainer_command(tiny_pipeline_dir, root, run_root, run_id, *overrides), cwd=ROOT,
                            env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for(path: Path, process: subprocess.Popen, what) -> None:
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline:
        if path.exists() and what(path):
            return
        time.sleep(0.02)
    raise AssertionError(f"the run never reached {path}")


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
def test_a_sincos_run_stopped_and_resumed_ends_bitwise_equal(stop, libero, tiny_pipeline_dir, tmp_path):
    dataset, overrides, straight = libero
    run_dir = tmp_path / "stopped"
    process = _started(tiny_pipeline_dir, tmp_path, tmp_path, "stopped", overrides)
    if stop == "kill -9":
        _wait_for(run_dir / "checkpoints/steps_5_training_state/trainer_state.json", process, Path.is_file)
        kill_tree(process.pid)
        process.wait()
        time.sleep(0.5)  # let the killed workers' exits land before looking at their files
    else:
        _wait_for(run_dir / "metrics.jsonl", process,
                  lambda p: any(json.loads(line).get("step", 0) >= 2 for line in p.read_text().splitlines()
                                if line.endswith("}")))
        os.killpg(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=600)
        assert "stopped by SIGTERM after step" in stderr, stderr[-3000:]
    assert not (run_dir / "final_model").exists(), "the run finished before it was stopped"

    resumed = train(tiny_pipeline_dir, tmp_path, tmp_path, "stopped", *overrides, "--trainer.is_resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    assert_ends_equal(run_dir, straight)


def test_an_augmented_run_resumes_bitwise(tiny_pipeline_dir, tmp_path):
    """oxe_droid crops and jitters its frames in training (the original's transforms), each sample's draw from the
    data seed: a run continued from its step-3 state draws what the uninterrupted run drew, and ends equal."""
    dataset = generate_lerobot("oxe_droid", tmp_path / "data" / "droid", episodes=3, frames=(10, 14))
    overrides = (*data_overrides(dataset, "oxe_droid"), *SIX_STEPS)
    straight = train_in_process(tiny_pipeline_dir, tmp_path, tmp_path / "runs", "straight", *overrides)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "image augmentation crop 0.95" in straight.stderr
    shutil.copytree(tmp_path / "runs/straight", tmp_path / "runs/killed")
    as_killed_after(tmp_path / "runs/killed", 3)
    resumed = train_in_process(tiny_pipeline_dir, tmp_path, tmp_path / "runs", "killed", *overrides,
                               "--trainer.is_resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_ends_equal(tmp_path / "runs/killed", tmp_path / "runs/straight")
