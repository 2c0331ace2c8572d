"""The trainer end to end on the tiny pipeline and tiny RoboTwin data: real `accelerate launch` subprocesses (one
and two processes, kill and resume, DeepSpeed), and the non-finite guard in-process."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import torch

from helpers.cli_runs import kill_tree
from helpers.training_runs import RESUME_RUN, ROOT, environment, metrics, train, train_in_process, trainer_command

pytestmark = pytest.mark.slow  # every test starts accelerate launch

FROZEN = ("backbone_interface.extractor.text_encoder.", "backbone_interface.extractor.vae.")


@pytest.fixture(scope="module")
def twenty_steps(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory):
    run_root = tmp_path_factory.mktemp("runs")
    result = train(tiny_pipeline_dir, tiny_robotwin_root, run_root, "smoke", "--trainer.max_train_steps=20",
                   "--trainer.save_interval=10", "--trainer.logging_frequency=1", "--trainer.eval_interval=10")
    assert result.returncode == 0, result.stderr[-3000:]
    return run_root / "smoke"


def test_loss_falls_over_twenty_steps(twenty_steps):
    losses = [r["total_loss"] for r in metrics(twenty_steps) if "total_loss" in r]
    assert len(losses) == 20
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < first, (first, last)


def test_run_directory_holds_the_originals_files(twenty_steps):
    for name in ("config.yaml", "dataset_statistics.json", "summary.jsonl", "metrics.jsonl",
                 "checkpoints/steps_10_pytorch_model.pt", "checkpoints/steps_20_pytorch_model.pt",
                 "checkpoints/steps_20_training_state/trainer_state.json", "final_model/pytorch_model.pt"):
        assert (twenty_steps / name).is_file(), name
    assert [json.loads(line) for line in (twenty_steps / "summary.jsonl").read_text().splitlines()] == [
        {"steps": 10}, {"steps": 20}]
    stats = json.loads((twenty_steps / "dataset_statistics.json").read_text())
    (tag,) = stats
    assert {"action", "state", "num_transitions", "num_trajectories"} <= set(stats[tag])
    assert {"min", "max", "mean", "std", "q01", "q99", "mask"} <= set(stats[tag]["action"])
    from DiT4DiT.config.schema import load_config

    saved = load_config(twenty_steps / "config.yaml")  # the resolved config loads back through the schema
    assert saved.trainer.max_train_steps == 20 and saved.output_dir == str(twenty_steps)


def test_metrics_report_losses_rates_and_throughput(twenty_steps):
    records = metrics(twenty_steps)
    step_record = next(r for r in records if "total_loss" in r)
    for key in ("action_loss", "future_video_loss", "grad_norm", "learning_rate/action_model",
                "learning_rate/backbone_interface", "data_time", "model_time", "samples_per_s", "host_peak_rss_mb"):
        assert key in step_record, key
    evals = [r for r in records if "eval_action_mse" in r]
    assert [r["step"] for r in evals] == [10, 20]
    assert all(r["eval_action_mse"] >= 0 for r in evals)


def test_loss_curve_png_is_written(twenty_steps):
    assert (twenty_steps / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoints_leave_out_frozen_modules(twenty_steps):
    weights = torch.load(twenty_steps / "final_model/pytorch_model.pt", weights_only=True)
    assert not [k for k in weights if k.startswith(FROZEN)]
    assert any(k.startswith("action_model.") for k in weights)
    assert any(k.startswith("backbone_interface.extractor.transformer.") for k in weights)


@pytest.mark.xdist_group("resume")  # shares uninterrupted_run
def test_kill_and_resume_ends_where_an_uninterrupted_run_ends(tiny_pipeline_dir, tiny_robotwin_root, tmp_path,
                                                              uninterrupted_run):
    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(
        trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "killed", *RESUME_RUN),
        cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    marker = killed_dir / "checkpoints/steps_6_training_state/trainer_state.json"
    deadline = time.monotonic() + 600
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    kill_tree(process.pid)
    process.wait()
    time.sleep(0.5)  # let the killed workers' exits land before looking at their files
    assert marker.exists()
    assert not (killed_dir / "final_model").exists(), "the run finished before the kill; nothing was interrupted"

    resumed = train(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "killed", *RESUME_RUN, "--trainer.is_resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    a = torch.load(uninterrupted_run / "final_model/pytorch_model.pt", weights_only=True)
    b = torch.load(killed_dir / "final_model/pytorch_model.pt", weights_only=True)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    losses = lambda run_dir: [(r["step"], r["total_loss"]) for r in metrics(run_dir) if "total_loss" in r]
    assert losses(uninterrupted_run) == losses(killed_dir)


def test_two_processes_train_and_hold_equal_weights(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    result = train(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "ddp", "--trainer.max_train_steps=6",
                   "--trainer.save_interval=3", "--trainer.logging_frequency=3", processes=2)
    assert result.returncode == 0, result.stderr[-3000:]
    # Each dataset is scanned by one process only; each shared message appears once.
    scans = [line for line in result.stderr.splitlines() if "scanning " in line]
    assert scans and all("[rank 0] scanning" in line for line in scans)
    assert len(scans) == len({line.split("scanning ")[1] for line in scans})
    (store,) = [line for line in result.stderr.splitlines() if "prompt store: " in line]
    instructions, encoded = (int(n) for n in store.split("prompt store: ")[1].split(" encoded")[0].split(" instructions, "))
    assert instructions == encoded > 0 and "text encoder released" in store
    assert result.stderr.count("prompt store: ") == 1
    records = [r for r in metrics(tmp_path / "ddp") if "total_loss" in r]
    assert [r["step"] for r in records] == [3, 6]
    assert all(r["total_loss_max"] >= r["total_loss"] for r in records)
    (checks,) = [r["replica_weight_checksums"] for r in metrics(tmp_path / "ddp") if "replica_weight_checksums" in r]
    assert len(checks) == 2 and checks[0] == checks[1]
    assert (tmp_path / "ddp/checkpoints/steps_6_training_state/rng_rank1.pt").is_file()
    assert (tmp_path / "ddp/final_model/pytorch_model.pt").is_file()


def test_ranks_that_end_apart_keep_the_final_model_and_are_named(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    """Rank 1's float64 sums are off in the last bits (a non-deterministic device sum) and one of its tensors
    really differs at the end: the run still ends with its final model, and the warning names rank and tensor."""
    command = trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "apart", "--trainer.max_train_steps=2",
                              "--trainer.save_interval=2", processes=2)
    command[command.index("DiT4DiT/training/train.py")] = str(ROOT / "tests/helpers/uneven_replicas.py")
    result = subprocess.run(command, cwd=ROOT, env=environment(2), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (changed,) = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("UNEVEN_REPLICAS_TENSOR")]
    assert "THE RANKS ENDED WITH DIFFERENT WEIGHTS" in result.stderr
    assert "rank 1 differs from rank 0 in 1 of " in result.stderr and f"tensor(s): {changed}\n" in result.stderr + "\n"
    assert (tmp_path / "apart/final_model/pytorch_model.pt").is_file()
    (checks,) = [r["replica_weight_checksums"] for r in metrics(tmp_path / "apart") if "replica_weight_checksums" in r]
    assert len(checks) == 2 and checks[0] != checks[1]


def test_non_finite_loss_stops_with_its_step_and_keeps_the_last_good_checkpoint(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    first = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "nan", "--trainer.max_train_steps=4",
                             "--trainer.save_interval=2")
    assert first.returncode == 0, first.stderr[-3000:]
    # Continue the run with a loss that overflows: the guard must stop at step 5 and touch no checkpoint.
    before = (tmp_path / "nan/checkpoints/steps_4_pytorch_model.pt").read_bytes()
    second = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "nan", "--trainer.max_train_steps=8",
                              "--trainer.save_interval=2", "--trainer.is_resume=true",
                              "--trainer.loss_scale.future_video=inf")
    assert second.returncode != 0
    assert "non-finite loss at optimizer step 5, micro-batch 0 (epoch" in second.stderr
    assert (tmp_path / "nan/checkpoints/steps_4_pytorch_model.pt").read_bytes() == before
    assert not (tmp_path / "nan/checkpoints/steps_6_pytorch_model.pt").exists()
    torch.load(tmp_path / "nan/checkpoints/steps_4_pytorch_model.pt", weights_only=True)


def test_a_config_error_through_accelerate_launch_exits_non_zero(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    result = train(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "typo", "--trainer.max_train_step=3")
    assert result.returncode != 0
    assert "unknown config key 'trainer.max_train_step'. Did you mean 'trainer.max_train_steps'?" in result.stderr
    assert not (tmp_path / "typo").exists()


@pytest.mark.xdist_group("deepspeed")  # beside ZeRO-3: the first DeepSpeed run on CPU compiles its shm op
def test_deepspeed_zero2_trains_and_resumes(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    """The NPU/GPU launch configuration (DeepSpeed ZeRO-2, bf16) on one CPU process: state saved by the engine."""
    launch = ["--config_file", "DiT4DiT/config/deepseeds/deepspeed_zero2.yaml"]

    def run(*overrides):
        command = trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "zero2", "--trainer.save_interval=2", *overrides)
        command[command.index("--config_file"):command.index("--config_file") + 2] = launch
        return subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=900)

    first = run("--trainer.max_train_steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    state = tmp_path / "zero2/checkpoints/steps_2_training_state"
    assert (state / "deepspeed").is_dir() and (state / "scheduler.pt").is_file()
    second = run("--trainer.max_train_steps=4", "--trainer.is_resume=true")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stderr and "at step 2" in second.stderr
    steps = [r["step"] for r in metrics(tmp_path / "zero2") if "total_loss" in r]
    assert steps == [2, 4]
