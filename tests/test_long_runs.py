"""Long runs end to end: preemption, strict resume, damaged and half-written states, run-directory safety.

Real `accelerate launch` subprocesses where the launch matters (signals, resume equality); the trainer's own
exit codes are checked by running its entry point directly (accelerate launch reduces any failure to 1).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from DiT4DiT.dataloader.errors import DataError
from helpers.bad_inputs import error_lines
from helpers.cli_runs import descendants, kill_tree
from helpers.fixtures_data import snapshot
from helpers.training_runs import RESUME_RUN, ROOT, environment, metrics, train, train_in_process, trainer_command

pytestmark = pytest.mark.slow  # accelerate launch, signals and kills; the resume-protocol checks run in-process

EXIT_PREEMPTED = 75
KILL_DURING_SAVE = Path(__file__).resolve().parent / "helpers" / "kill_during_save.py"


def direct(pipeline, data, run_root, run_id, *overrides, entry=("DiT4DiT/training/train.py",)) -> subprocess.CompletedProcess:
    """The trainer's entry point in one plain process (no launcher), so its own exit status is seen."""
    command = trainer_command(pipeline, data, run_root, run_id, *overrides)
    command = [sys.executable, *entry, *command[command.index("--config_yaml"):]]
    return subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=900)


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final_model/pytorch_model.pt", weights_only=True)


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "weights differ"


def losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["total_loss"]) for r in metrics(run_dir) if "total_loss" in r]


COMMON = ("--trainer.max_train_steps=6", "--trainer.save_interval=2", "--trainer.logging_frequency=1",
          "--trainer.eval_interval=100", "--trainer.num_warmup_steps=2")


@pytest.fixture(scope="module")
def six_steps(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory):
    """An uninterrupted 6-step run with states at steps 4 and 6 (keep_last_states=2)."""
    run_root = tmp_path_factory.mktemp("runs")
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, run_root, "six", *COMMON)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_root / "six"


def copy_run(run_dir: Path, target_root: Path, name: str) -> Path:
    shutil.copytree(run_dir, target_root / name)
    return target_root / name


# --- preemption -----------------------------------------------------------------------------------------

def wait_for_step(run_dir: Path, step: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline:
        path = run_dir / "metrics.jsonl"
        if path.exists() and any(json.loads(line).get("step", 0) >= step for line in path.read_text().splitlines()
                                 if line.endswith("}")):
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never reached step {step}")


@pytest.mark.xdist_group("resume")  # shares uninterrupted_run
def test_sigterm_saves_and_the_resumed_run_ends_bitwise_equal(tiny_pipeline_dir, tiny_robotwin_root, tmp_path,
                                                               uninterrupted_run):
    # With a DataLoader worker (RESUME_RUN): the signal reaches it too (torchrun signals the trainer's process group).
    # What a scheduler does: SIGTERM to the launch's process group (accelerate forwards it to the trainer).
    process = subprocess.Popen(
        trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "stopped", *RESUME_RUN),
        cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    wait_for_step(tmp_path / "stopped", 3, process)
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=600)
    # The newest state is the one the signal saved (a scheduled one at step 6 may be there too).
    state = max((tmp_path / "stopped/checkpoints").glob("steps_*_training_state"), key=lambda s: int(s.name.split("_")[1]))
    stopped_at = int(state.name.split("_")[1])
    assert f"stopped by SIGTERM after step {stopped_at};" in stderr, stderr[-3000:]
    assert 3 <= stopped_at < 12 and not (tmp_path / "stopped/final_model").exists()
    statistics = snapshot(tmp_path / "stopped")["dataset_statistics.json"]

    resumed = train(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "stopped", *RESUME_RUN, "--trainer.is_resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {stopped_at}" in resumed.stderr
    assert_same_weights(final_weights(uninterrupted_run), final_weights(tmp_path / "stopped"))
    assert losses(uninterrupted_run) == losses(tmp_path / "stopped")
    assert snapshot(tmp_path / "stopped")["dataset_statistics.json"] == statistics  # reused, not rewritten


def test_a_signal_on_one_rank_stops_every_rank_after_the_same_step(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    process = subprocess.Popen(
        trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "ddp", "--trainer.max_train_steps=40",
                        "--trainer.save_interval=100", "--trainer.logging_frequency=1", processes=2),
        cwd=ROOT, env=environment(2), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    wait_for_step(tmp_path / "ddp", 2, process)
    workers = [pid for pid in descendants(process.pid) if "train.py" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert len(workers) == 2
    os.kill(max(workers), signal.SIGTERM)  # one rank only
    _, stderr = process.communicate(timeout=600)
    assert "stopped by SIGTERM after step" in stderr and "stopped by a signal on another rank after step" in stderr
    assert f"exitcode  : {EXIT_PREEMPTED}" in stderr  # the trainer's own status, as torchrun reports it
    (state,) = (tmp_path / "ddp/checkpoints").glob("steps_*_training_state")
    assert {p.name for p in state.iterdir()} >= {"rng_rank0.pt", "rng_rank1.pt", "trainer_state.json"}
    steps = {line.split("after step ")[1].split(";")[0] for line in stderr.splitlines() if "after step" in line}
    assert steps == {state.name.split("_")[1]}


# --- kill -9 in the middle of a save ---------------------------------------------------------------------

@pytest.mark.parametrize("write", [5, 7])  # file saves 1-4 make step 2; 5: the weights of step 4, 7: its optimizer.pt
def test_kill_9_during_a_save_leaves_a_loadable_state(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, write):
    killed = direct(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "killed", *COMMON,
                    entry=(str(KILL_DURING_SAVE), str(write)))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoints = tmp_path / "killed/checkpoints"
    assert [p.name for p in checkpoints.glob("steps_*_training_state")] == ["steps_2_training_state"]
    leftovers = [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]
    assert leftovers, "the kill did not land inside a save"

    resumed = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "killed",
                               *COMMON, "--trainer.is_resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "at step 2" in resumed.stderr
    assert "temporary file(s) left by an interrupted run" in resumed.stderr
    assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]


# --- integrity -------------------------------------------------------------------------------------------

def test_a_tampered_state_is_refused_and_the_previous_one_used(six_steps, tiny_pipeline_dir, tiny_robotwin_root,
                                                              tmp_path):
    run = copy_run(six_steps, tmp_path, "tampered")
    optimizer = run / "checkpoints/steps_6_training_state/optimizer.pt"
    data = bytearray(optimizer.read_bytes())
    data[len(data) // 2] ^= 0xFF
    optimizer.write_bytes(bytes(data))
    resumed = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "tampered",
                               *COMMON, "--trainer.is_resume=true",
                               "--trainer.max_train_steps=8")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "steps_6_training_state fails its manifest check and is not used" in resumed.stderr
    assert "optimizer.pt: sha256 differs from the manifest" in resumed.stderr
    assert "steps_4_training_state at step 4" in resumed.stderr


# --- strict resume ---------------------------------------------------------------------------------------

def test_resume_without_a_training_state_exits_2_and_writes_nothing(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    (tmp_path / "typo").mkdir()
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "typo", "--trainer.is_resume=true")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "ResumeError: trainer.is_resume is set but" in result.stderr
    assert "holds no complete, verified training state" in result.stderr and "--trainer.resume_weights_only true" \
        in result.stderr
    assert not list((tmp_path / "typo").iterdir())  # the lock taken while looking is gone again


def test_resume_refuses_a_changed_batch_size_unless_allowed(six_steps, tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    run = copy_run(six_steps, tmp_path, "changed")
    before = snapshot(run)
    refused = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "changed",
                               *COMMON, "--trainer.is_resume=true",
                               "--datasets.vla_data.per_device_batch_size=2", "--seed=7")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "datasets.vla_data.per_device_batch_size: 4 -> 2" in refused.stderr and "seed: 42 -> 7" in refused.stderr
    assert "--trainer.resume_allow_changes=datasets.vla_data.per_device_batch_size,seed" in refused.stderr
    assert snapshot(run) == before
    allowed = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "changed",
                               *COMMON, "--trainer.is_resume=true",
                               "--trainer.max_train_steps=7", "--datasets.vla_data.per_device_batch_size=2",
                               "--trainer.resume_allow_changes=datasets.vla_data.per_device_batch_size")
    assert allowed.returncode == 0, allowed.stderr[-3000:]


def test_resume_without_config_yaml_says_how_to_restore_it(six_steps, tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    run = copy_run(six_steps, tmp_path, "no_config")
    (run / "config.yaml").unlink()
    before = snapshot(run)
    refused = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "no_config", *COMMON,
                               "--trainer.is_resume=true", "--trainer.max_train_steps=7")
    assert refused.returncode == 2, refused.stderr[-3000:]
    restore = f"cp {run}/checkpoints/steps_6_training_state/config.yaml {run}/config.yaml"
    assert f"ResumeError: {run}/config.yaml is missing" in refused.stderr and restore in refused.stderr
    assert snapshot(run) == before
    subprocess.run(restore.split(), check=True)
    resumed = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "no_config", *COMMON,
                               "--trainer.is_resume=true", "--trainer.max_train_steps=7")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def _in_every_state(name: str, data: bytes):
    return lambda run: [(state / name).write_bytes(data) for state in run.glob("checkpoints/steps_*_training_state")]


def _run_file(name: str, data: bytes):
    return lambda run: (run / name).write_bytes(data)


def _first_line(name: str, line: bytes):
    return lambda run: (run / name).write_bytes(line + (run / name).read_bytes())


RESTORE = "Restore it: cp "
# (damage to a finished run's folder, the words of its one error line): each was a traceback on resume before.
BROKEN_RUN_FILES = {
    "config.yaml not YAML": (_run_file("config.yaml", b"seed: [\n"), ("config.yaml, line 2", "not valid YAML", RESTORE)),
    "config.yaml a list": (_run_file("config.yaml", b"- seed\n"), ("config.yaml: the file is a list", RESTORE)),
    "config.yaml binary": (_run_file("config.yaml", bytes(range(256))), ("config.yaml: a binary file", RESTORE)),
    "config.yaml with a tag": (_run_file("config.yaml", b"seed: !!python/object/apply:os.system [true]\n"),
                               ("config.yaml", "not valid YAML", RESTORE)),
    "trainer_state.json truncated": (_in_every_state("trainer_state.json", b'{"step": 6, "mani'),
                                     ("no complete, verified training state", "trainer_state.json: no readable manifest")),
    "trainer_state.json a list": (_in_every_state("trainer_state.json", b"[6, 4]"),
                                  ("no complete, verified training state", "trainer_state.json: no readable manifest")),
    "metrics.jsonl a list": (_first_line("metrics.jsonl", b"[1, 2]\n"), ("metrics.jsonl, line 1: a JSON list",)),
    "metrics.jsonl binary": (_run_file("metrics.jsonl", bytes(range(256))), ("metrics.jsonl: not UTF-8 text",)),
    "dataset_statistics.json truncated": (_run_file("dataset_statistics.json", b'{"robotwin": {"act'),
                                          ("dataset_statistics.json: not readable as the run's statistics",)),
    "dataset_statistics.json a list": (_run_file("dataset_statistics.json", b"[]"),
                                       ("dataset_statistics.json: holds a list, not the run's statistics",)),
    "dataset_statistics.json binary": (_run_file("dataset_statistics.json", bytes(range(256))),
                                       ("dataset_statistics.json: not readable as the run's statistics",)),
}


@pytest.mark.parametrize("kind", BROKEN_RUN_FILES)
def test_a_broken_run_file_on_resume_is_one_line_and_nothing_is_written(six_steps, tiny_pipeline_dir,
                                                                         tiny_robotwin_root, tmp_path, kind):
    damage, words = BROKEN_RUN_FILES[kind]
    run = copy_run(six_steps, tmp_path, "broken")
    damage(run)
    before = snapshot(run)
    refused = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "broken", *COMMON,
                               "--trainer.is_resume=true", "--trainer.max_train_steps=7")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    lines = error_lines(refused.stderr)
    assert len(lines) == 1, lines
    assert not [word for word in words if word not in lines[0]], lines[0]
    assert snapshot(run) == before


def test_a_full_disk_at_the_loss_plot_keeps_the_final_model(six_steps, tiny_pipeline_dir, tiny_robotwin_root,
                                                           tmp_path):
    """/dev/full answers every write with ENOSPC, as a full disk does: the plot, written last, is a warning."""
    run = copy_run(six_steps, tmp_path, "full")
    (run / "loss_curve.png").unlink(missing_ok=True)
    os.symlink("/dev/full", run / "loss_curve.png")
    resumed = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "full", *COMMON,
                               "--trainer.is_resume=true", "--trainer.max_train_steps=7")
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr[-3000:]
    assert "loss_curve.png not written (No space left on device)" in resumed.stderr
    saved = torch.load(run / "checkpoints/steps_7_pytorch_model.pt", weights_only=True)
    assert_same_weights(final_weights(run), saved)  # the final model is step 7's


def test_a_run_folder_deleted_mid_run_is_one_line(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    command = trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "gone", "--trainer.max_train_steps=400",
                              "--trainer.save_interval=1000", "--trainer.logging_frequency=1")
    command = [sys.executable, "DiT4DiT/training/train.py", *command[command.index("--config_yaml"):]]
    process = subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    wait_for_step(tmp_path / "gone", 2, process)
    os.rename(tmp_path / "gone", tmp_path / "deleted")  # gone from its path at once, as rm -rf leaves it
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    # diffusers' own warning on loading the tiny pipeline's stand-in safety checker is not the run's error
    lines = [line for line in error_lines(stderr) if not line.startswith("Expected types for safety_checker")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"RunDirLostError: {tmp_path}/gone/") and "No such file or directory" in lines[0], lines[0]
    assert "--trainer.is_resume true" in lines[0]


def test_a_write_refused_in_the_run_folder_is_one_line(tmp_path):
    from DiT4DiT.training.run_dir import RunDirLostError, writes_lost_as_one_line

    for code in (errno.EROFS, errno.EACCES):  # a read-only remount, permissions taken (chmod holds no root back)
        with pytest.raises(RunDirLostError, match=r"checkpoints/x\.pt: .*: the run folder .* was deleted, made read-only"):
            with writes_lost_as_one_line(tmp_path):
                raise OSError(code, os.strerror(code), str(tmp_path / "checkpoints/x.pt"))
    with pytest.raises(PermissionError):  # elsewhere: not the run folder's doing, so left as it was
        with writes_lost_as_one_line(tmp_path / "run"):
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "data/x.mp4"))


def test_weights_only_resume_of_an_original_style_run(six_steps, tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    """A run dir with only steps_N_pytorch_model.pt (what the original DiT4DiT leaves): continue from step N."""
    (tmp_path / "original/checkpoints").mkdir(parents=True)
    shutil.copy(six_steps / "checkpoints/steps_4_pytorch_model.pt", tmp_path / "original/checkpoints")
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "original",
                              *COMMON, "--trainer.is_resume=true",
                              "--trainer.resume_weights_only=true")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WEIGHTS-ONLY RESUME from" in result.stderr and "step 4" in result.stderr
    rates = lambda run: [(r["step"], r["learning_rate/action_model"]) for r in metrics(run) if "total_loss" in r]
    assert rates(tmp_path / "original") == rates(six_steps)[4:]  # the schedule was fast-forwarded to step 4
    assert (tmp_path / "original/config.yaml").is_file()  # the run folder is complete (the server reads it)


# --- run directory ---------------------------------------------------------------------------------------

def test_a_new_run_over_a_finished_one_exits_2_and_writes_nothing(six_steps, tiny_pipeline_dir, tiny_robotwin_root,
                                                                  tmp_path):
    run = copy_run(six_steps, tmp_path, "done")
    before = snapshot(run)
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "done", *COMMON)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"RunDirError: {run} already holds a run (config.yaml, checkpoints, final_model" in result.stderr
    assert "--trainer.is_resume true" in result.stderr and "--trainer.move_old_run true" in result.stderr
    assert snapshot(run) == before


def test_move_old_run_keeps_the_earlier_run_aside(six_steps, tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    run = copy_run(six_steps, tmp_path, "again")
    old_final = final_weights(run)
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "again",
                              *COMMON, "--trainer.max_train_steps=2",
                              "--trainer.move_old_run=true")
    assert result.returncode == 0, result.stderr[-3000:]
    (aside,) = tmp_path.glob("again.old-*")
    assert_same_weights(final_weights(aside), old_final)
    assert [r["step"] for r in metrics(run) if "total_loss" in r] == [1, 2]


def test_a_second_run_with_the_same_run_id_is_kept_out(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    first = subprocess.Popen(
        trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "busy", "--trainer.max_train_steps=200",
                        "--trainer.save_interval=100"),
        cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        lock = tmp_path / "busy/run.lock"
        deadline = time.monotonic() + 300
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        holder = json.loads(lock.read_text())
        second = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "busy", "--trainer.is_resume=true")
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"is in use by another run (pid {holder['pid']} on host {holder['host']}" in second.stderr
    finally:
        # The trainer runs in a session of its own below accelerate: killing the launch's group would leave it
        # training its 200 steps beside the rest of the suite.
        kill_tree(first.pid)
        first.wait()


def test_deterministic_key_turns_on_torchs_deterministic_kernels(tiny_pipeline_dir, tiny_robotwin_root, tmp_path,
                                                                  monkeypatch):
    for name in ("HCCL_DETERMINISTIC", "CUBLAS_WORKSPACE_CONFIG"):  # put back as they were (absent) afterwards
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    assert not torch.are_deterministic_algorithms_enabled()
    try:
        result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "deterministic",
                                  "--trainer.max_train_steps=2", "--trainer.save_interval=2",
                                  "--trainer.deterministic=true")
        enabled = torch.are_deterministic_algorithms_enabled()
        filled = torch.utils.deterministic.fill_uninitialized_memory
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = True  # torch's default
    assert result.returncode == 0, result.stderr[-3000:]
    # deterministic kernels, without NaN-filling every new buffer (on an NPU host every host buffer too)
    assert enabled and not filled
    assert ("deterministic kernels on (trainer.deterministic): torch.use_deterministic_algorithms(True), "
            "HCCL_DETERMINISTIC=true, CUBLAS_WORKSPACE_CONFIG=:4096:8") in result.stderr
    assert (os.environ["HCCL_DETERMINISTIC"], os.environ["CUBLAS_WORKSPACE_CONFIG"]) == ("true", ":4096:8")
    assert (tmp_path / "deterministic/final_model/pytorch_model.pt").is_file()


# --- a data worker's error -------------------------------------------------------------------------------

def test_a_video_corrupted_mid_run_ends_the_run_with_the_workers_message(tiny_pipeline_dir, writable_task, tmp_path):
    """Two DataLoader workers; a worker raising DataError reaches the trainer, which exits with that line and the
    error's status, its workers gone (they ignore SIGTERM: before, the trainer hung in its exit-time join)."""
    command = trainer_command(tiny_pipeline_dir, writable_task.parent, tmp_path, "corrupted", "--trainer.max_train_steps=500",
                              "--trainer.save_interval=1000", "--trainer.logging_frequency=1",
                              "--datasets.vla_data.data_mix=robotwin_task1", "--datasets.vla_data.num_workers=2")
    command = [sys.executable, "DiT4DiT/training/train.py", *command[command.index("--config_yaml"):]]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL, stderr=stderr,
                                   start_new_session=True)
    try:
        wait_for_step(tmp_path / "corrupted", 2, process)
        for video in writable_task.rglob("*.mp4"):  # the container header: no frame decodes any more
            with open(video, "r+b") as handle:
                handle.write(b"\0" * 2048)
        code = process.wait(timeout=300)
    finally:
        kill_tree(process.pid)
    lines = (tmp_path / "stderr.txt").read_text().splitlines()
    assert code == DataError.exit_code, lines[-20:]
    assert lines[-1].startswith(f"DataError: {writable_task}/videos/") and "cannot be decoded" in lines[-1], lines[-5:]
    assert not [line for line in lines if "Traceback" in line or "DataLoader worker" in line]
    with pytest.raises(ProcessLookupError):  # no worker left in the trainer's session
        os.killpg(process.pid, 0)


# --- a start stopped during set-up -----------------------------------------------------------------------

def test_sigterm_during_set_up_leaves_a_folder_the_next_start_takes(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    command = trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "set_up", "--trainer.max_train_steps=500")
    command = [sys.executable, "DiT4DiT/training/train.py", *command[command.index("--config_yaml"):]]
    process = subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    lock = tmp_path / "set_up/run.lock"
    deadline = time.monotonic() + 300
    while not lock.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGTERM)  # the data and the model are still being built
    assert process.wait(timeout=300) == -signal.SIGTERM
    assert not list((tmp_path / "set_up").glob("checkpoints/*")) and not (tmp_path / "set_up/metrics.jsonl").exists()

    again = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "set_up", *COMMON,
                             "--trainer.max_train_steps=2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "taking over the stale lock" in again.stderr
