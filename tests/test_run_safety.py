"""Run-directory lock and fresh-start check, checkpoint manifests, resume rules, signals: the pieces, in process."""

from __future__ import annotations

import json
import logging
import re
import os
import pickle
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.training import checkpoint as ckpt
from DiT4DiT.training import preemption, resume, run_dir
from DiT4DiT.training.host_waits import HostWaits

ROBOTWIN = Path(__file__).resolve().parents[1] / "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"


def finished_run(folder: Path) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text("seed: 42\n")
    (folder / "train.log").write_text("=== launcher log\n")
    return folder


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# --- run directory ---------------------------------------------------------------------------------------

def test_a_fresh_start_over_a_run_is_refused_and_changes_nothing(tmp_path):
    run = finished_run(tmp_path / "run")
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(run_dir.RunDirError, match=r"already holds a run \(config\.yaml, checkpoints\); nothing was "
                                                 r"written\. Choose one: continue it with --trainer\.is_resume true"):
        run_dir.claim_run_dir(run, is_resume=False, move_aside=False)
    assert sorted(p.name for p in run.iterdir()) == before


def test_the_launchers_log_alone_is_not_a_run(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/train.log").write_text("=== launcher log\n")
    run_dir.claim_run_dir(tmp_path / "run", is_resume=False, move_aside=False).release()


def test_move_old_run_moves_everything_but_the_log_and_lock(tmp_path, caplog):
    run = finished_run(tmp_path / "run")
    with caplog.at_level(logging.WARNING):
        lock = run_dir.claim_run_dir(run, is_resume=False, move_aside=True)
    (aside,) = tmp_path.glob("run.old-*")
    assert sorted(p.name for p in aside.iterdir()) == ["checkpoints", "config.yaml"]
    assert sorted(p.name for p in run.iterdir()) == ["run.lock", "train.log"]
    assert f"moved the earlier run in {run} aside to {aside}" in caplog.text
    lock.release()
    assert not (run / "run.lock").exists()


def test_move_old_run_never_moves_a_run_through_a_link_to_another_folder(tmp_path):
    # A run id that is a link to a sibling moved the sibling's run aside (and the new run trained in its folder).
    sibling = finished_run(tmp_path / "exp_b")
    before = sorted(p.name for p in sibling.iterdir())
    (tmp_path / "exp_a").symlink_to("exp_b")
    with pytest.raises(run_dir.RunDirError, match=r"exp_a is a symbolic link to exp_b; --trainer.move_old_run would "
                                                 r"move the run in that folder .* nothing was moved"):
        run_dir.claim_run_dir(tmp_path / "exp_a", is_resume=False, move_aside=True)
    assert sorted(p.name for p in sibling.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp_a", "exp_b"]


def test_a_live_lock_keeps_a_second_run_out(tmp_path):
    lock = run_dir.claim_run_dir(tmp_path / "run", is_resume=False, move_aside=False)
    record = json.loads((tmp_path / "run/run.lock").read_text())
    assert record["host"] == socket.gethostname() and record["pid"] == os.getpid() and record["started"]
    expected = f"is in use by another run (pid {os.getpid()} on host {socket.gethostname()}, started {record['started']}"
    with pytest.raises(run_dir.RunDirError, match=re.escape(expected)):
        run_dir.claim_run_dir(tmp_path / "run", is_resume=True, move_aside=False)
    lock.release()


def test_a_stale_lock_on_this_host_is_reported_and_taken_over(tmp_path, caplog):
    (tmp_path / "run").mkdir()
    pid = dead_pid()
    (tmp_path / "run/run.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "started": "then"}))
    with caplog.at_level(logging.WARNING):
        lock = run_dir.claim_run_dir(tmp_path / "run", is_resume=True, move_aside=False)
    assert f"taking over the stale lock of {tmp_path / 'run'}: pid {pid} on this host" in caplog.text
    assert json.loads((tmp_path / "run/run.lock").read_text())["pid"] == os.getpid()
    lock.release()


def test_a_lock_of_another_host_is_never_judged_stale(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/run.lock").write_text(json.dumps({"host": "node-7", "pid": dead_pid(), "started": "then"}))
    with pytest.raises(run_dir.RunDirError, match=r"on host node-7.*delete the lock file"):
        run_dir.claim_run_dir(tmp_path / "run", is_resume=True, move_aside=False)


def test_stale_temporaries_are_removed_at_start(tmp_path):
    checkpoints = tmp_path / "run/checkpoints"
    ckpt.staging_dir(checkpoints, 40).mkdir(parents=True)
    (checkpoints / ".steps_40_pytorch_model.pt.abc.tmp").write_bytes(b"half")
    (tmp_path / "run/.metrics.jsonl.x.tmp").write_text("{")
    (checkpoints / "steps_20_pytorch_model.pt").write_bytes(b"kept")
    run_dir.claim_run_dir(tmp_path / "run", is_resume=True, move_aside=False).release()
    assert [p.name for p in checkpoints.iterdir()] == ["steps_20_pytorch_model.pt"]
    assert not list((tmp_path / "run").glob(".*"))


# --- manifests -------------------------------------------------------------------------------------------

def published_state(checkpoints: Path, step: int) -> Path:
    staging = ckpt.staging_dir(checkpoints, step)
    weights = ckpt.weights_path(checkpoints, step)
    ckpt.save_weights({"w": torch.full((4,), float(step))}, weights)
    ckpt.save_rank_state(staging, 0, torch.device("cpu"))
    names = ckpt.manifest_names(staging, weights)
    manifest = ckpt.manifest_share(staging, names, 0, 1)
    return ckpt.publish_state(checkpoints, step, {"step": step, "weights": weights.name, "num_processes": 1,
                                                  ckpt.MANIFEST: manifest}, keep_last=2)


def test_the_manifest_lists_every_file_with_size_and_sha256(tmp_path):
    state = published_state(tmp_path, 10)
    manifest = ckpt.read_trainer_state(state)[ckpt.MANIFEST]
    assert sorted(manifest) == ["../steps_10_pytorch_model.pt", "rng_rank0.pt"]
    assert manifest["rng_rank0.pt"] == ckpt.file_digest(state / "rng_rank0.pt")
    assert ckpt.verify_share(state, 0, 1) == []


def test_the_hashing_is_shared_between_ranks(tmp_path):
    state = published_state(tmp_path, 10)
    names = sorted(ckpt.read_trainer_state(state)[ckpt.MANIFEST])
    shares = [ckpt.manifest_share(state, names, rank, 2) for rank in (0, 1)]
    assert [sorted(s) for s in shares] == [names[0::2], names[1::2]]


@pytest.mark.parametrize("damage, problem", [
    (lambda s: (s / "rng_rank0.pt").write_bytes(b"x"), r"rng_rank0\.pt: 1 bytes, the manifest says \d+"),
    (lambda s: (s / "../steps_10_pytorch_model.pt").unlink(), r"steps_10_pytorch_model\.pt: missing"),
    (lambda s: (s / "deepspeed").mkdir() or (s / "deepspeed/mp_rank_00_model_states.pt").write_bytes(b"planted"),
     r"deepspeed/mp_rank_00_model_states\.pt: not in the manifest"),
    (lambda s: (s / "trainer_state.json").write_text('{"step": 10}'), r"no readable manifest"),
])
def test_a_damaged_or_planted_file_fails_verification(tmp_path, damage, problem):
    state = published_state(tmp_path, 10)
    damage(state)
    (found,) = ckpt.verify_share(state, 0, 1)
    assert re.search(problem, found), found


def test_a_same_size_change_is_caught_by_the_hash(tmp_path):
    state = published_state(tmp_path, 10)
    data = bytearray((state / "rng_rank0.pt").read_bytes())
    data[-30] ^= 1
    (state / "rng_rank0.pt").write_bytes(bytes(data))
    assert ckpt.verify_share(state, 0, 1) == [f"{state / 'rng_rank0.pt'}: sha256 differs from the manifest"]


def test_a_full_disk_is_named(tmp_path):
    with pytest.raises(ckpt.DiskFullError, match=r"^no space left on device at /dev/full .*previous checkpoint is "
                                                 r"intact"):
        ckpt.save_checked({"w": torch.ones(10_000)}, Path("/dev/full"))


# --- resume rules ----------------------------------------------------------------------------------------

def test_changed_keys_are_listed_with_old_and_new_values():
    saved = load_config(ROBOTWIN)
    current = load_config(ROBOTWIN, ["datasets.vla_data.per_device_batch_size=8", "framework.action_model.noise_s=0.99",
                                     "trainer.max_train_steps=5"])
    assert resume.config_changes(saved, current, set()) == [
        "framework.action_model.noise_s: 0.999 -> 0.99", "datasets.vla_data.per_device_batch_size: 4 -> 8"]
    assert resume.config_changes(saved, current, {"framework.action_model", "datasets.vla_data.per_device_batch_size"}) == []


def test_keys_an_older_config_lacks_are_not_compared(tmp_path):
    from omegaconf import OmegaConf

    original = OmegaConf.create({"seed": 42, "datasets": {"vla_data": {"per_device_batch_size": 4}}})
    assert resume.config_changes(original, load_config(ROBOTWIN), set()) == []


def test_weights_only_resume_picks_the_newest_weights(tmp_path):
    for step in (5, 40, 100):
        (tmp_path / f"steps_{step}_pytorch_model.pt").write_bytes(b"")
    (tmp_path / "steps_7_pytorch_model.pt.tmp").write_bytes(b"")
    assert ckpt.newest_weights(tmp_path) == (100, tmp_path / "steps_100_pytorch_model.pt")


# --- signals ---------------------------------------------------------------------------------------------

def test_sigterm_is_noted_and_a_second_one_restores_the_default():
    stop = preemption.StopSignal().install()
    try:
        assert not stop.agreed()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.agreed() and stop.signal_name == "SIGTERM"
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the next one ends the process at once
    finally:
        stop.uninstall()
    assert str(preemption.Preempted("SIGTERM", 7, "/run/checkpoints/steps_7_training_state")) == (
        "stopped by SIGTERM after step 7; training state saved in /run/checkpoints/steps_7_training_state. Continue "
        "with the same command plus --trainer.is_resume true")


def test_resume_normalises_with_the_saved_statistics_and_never_rewrites_them(tiny_robotwin_root, data_cfg, tmp_path,
                                                                            caplog):
    from DiT4DiT.dataloader import save_dataset_statistics
    from helpers.fixtures_data import dataset_of
    from DiT4DiT.dataloader.transforms import Normalizer

    dataset = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"))
    (tag, saved), = dataset.statistics().items()
    saved["action"]["max"] = [m + 1.0 for m in saved["action"]["max"]]  # the run started on other data
    path = tmp_path / "dataset_statistics.json"
    save_dataset_statistics({tag: saved}, path)
    before = path.read_bytes(), path.stat().st_mtime_ns
    with caplog.at_level(logging.WARNING):
        resume.use_saved_statistics([dataset], path, is_main=True)
    assert "the saved ones stay in use" in caplog.text
    action = torch.linspace(-1, 1, len(saved["action"]["max"])).numpy()[None, :]
    expected = Normalizer(saved["action"]["normalization"], saved["action"]).normalize(action)
    assert (dataset.normalizers[tag][1].normalize(action) == expected).all()
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_a_run_without_saved_statistics_gets_the_current_ones(tiny_robotwin_root, data_cfg, tmp_path):
    from helpers.fixtures_data import dataset_of

    dataset = dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1"))
    resume.use_saved_statistics([dataset], tmp_path / "dataset_statistics.json", is_main=True)
    assert json.loads((tmp_path / "dataset_statistics.json").read_text()) == dataset.statistics()


# --- a forged training state (the manifest rewritten to match a planted file) -----------------------------

class _Planted:
    def __reduce__(self):  # would run on unpickling; weights_only refuses it first
        return (Path.touch, (Path("/nonexistent/planted-pickle-ran"),))


def _forge(state: Path, name: str) -> None:
    torch.save({"state": _Planted()}, state / name)
    trainer_state = ckpt.read_trainer_state(state)
    trainer_state[ckpt.MANIFEST][name] = ckpt.file_digest(state / name)
    (state / ckpt.TRAINER_STATE).write_text(json.dumps(trainer_state))


def test_a_forged_state_is_named_and_the_previous_one_is_used(tmp_path, caplog):
    from accelerate import Accelerator

    checkpoints = tmp_path / "checkpoints"
    older, newer = published_state(checkpoints, 10), published_state(checkpoints, 20)
    _forge(newer, "rng_rank0.pt")
    (problem,) = ckpt.verify_share(newer, 0, 1)
    assert problem.startswith(f"{newer / 'rng_rank0.pt'}: refused by torch.load(weights_only=True)")
    assert "\n" not in problem
    checkpointer = ckpt.Checkpointer(Accelerator(cpu=True), tmp_path, [], keep_last=2, waits=HostWaits(timedelta(seconds=60)))
    with caplog.at_level(logging.WARNING):
        found = checkpointer.find(weights_only_fallback=False)
    assert (found.step, found.state) == (10, older)
    assert "steps_20_training_state fails its manifest check" in caplog.text and "rng_rank0.pt: refused" in caplog.text


def test_a_forged_only_state_is_a_resume_error_naming_the_file(tmp_path):
    from accelerate import Accelerator

    state = published_state(tmp_path / "checkpoints", 10)
    _forge(state, "rng_rank0.pt")
    checkpointer = ckpt.Checkpointer(Accelerator(cpu=True), tmp_path, [], keep_last=2, waits=HostWaits(timedelta(seconds=60)))
    with pytest.raises(ckpt.ResumeError, match=r"states refused: steps_10_training_state: .*rng_rank0\.pt: refused by "
                                               r"torch\.load\(weights_only=True\)"):
        checkpointer.find(weights_only_fallback=False)


# --- DeepSpeed's files: probed and loaded with the weights-only unpickler ---------------------------------

class _Payload:
    """A pickle that touches `marker` when unpickled by anything but the weights-only unpickler."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


DEEPSPEED_FILES = ("deepspeed/mp_rank_00_model_states.pt", "deepspeed/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")


@pytest.mark.parametrize("name", DEEPSPEED_FILES)
def test_a_forged_deepspeed_file_is_refused_and_its_payload_never_runs(tmp_path, name):
    from accelerate import Accelerator

    marker = tmp_path / "payload-ran"
    state = published_state(tmp_path / "checkpoints", 10)
    (state / "deepspeed").mkdir()
    torch.save({"module": _Payload(marker)}, state / name)
    trainer_state = ckpt.read_trainer_state(state)
    trainer_state[ckpt.MANIFEST][name] = ckpt.file_digest(state / name)  # the forged manifest entry
    (state / ckpt.TRAINER_STATE).write_text(json.dumps(trainer_state))

    (problem,) = ckpt.verify_share(state, 0, 1)
    assert problem.startswith(f"{state / name}: refused by torch.load(weights_only=True)") and "\n" not in problem
    checkpointer = ckpt.Checkpointer(Accelerator(cpu=True), tmp_path, [], keep_last=2, waits=HostWaits(timedelta(seconds=60)))
    with pytest.raises(ckpt.ResumeError, match=re.escape(name) + r": refused by torch\.load"):
        checkpointer.find(weights_only_fallback=False)
    assert not marker.exists()


def test_deepspeeds_own_loader_runs_with_the_weights_only_unpickler(tmp_path):
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    marker, planted = tmp_path / "payload-ran", tmp_path / "planted.pt"
    torch.save({"optimizer_state_dict": _Payload(marker)}, planted)
    # What a ZeRO-2 optimizer state holds besides tensors (DeepSpeed 0.16).
    genuine = {"loss_scaler": LossScaler(1.0), "zero_stage": ZeroStageEnum.gradients,
               "param_slice_mappings": [{"w": fragment_address(numel=4, start=0)}], "state": torch.ones(4)}
    torch.save(genuine, tmp_path / "genuine.pt")
    engine = TorchCheckpointEngine()
    with ckpt.weights_only_loads(ckpt.deepspeed_types()):
        with pytest.raises(pickle.UnpicklingError):
            engine.load(str(planted), map_location="cpu")  # DeepSpeed passes weights_only=False
        loaded = engine.load(str(tmp_path / "genuine.pt"), map_location="cpu")
    assert not marker.exists()
    assert loaded["zero_stage"] == ZeroStageEnum.gradients and loaded["param_slice_mappings"][0]["w"].numel == 4
    assert loaded["loss_scaler"].cur_scale == 1.0 and ckpt.FORCE_WEIGHTS_ONLY not in os.environ
    engine.load(str(planted), map_location="cpu")  # the control: outside, DeepSpeed's load runs the payload
    assert marker.exists()


# --- a start that never trained --------------------------------------------------------------------------

def test_a_folder_with_only_set_up_files_is_reclaimed_with_a_line(tmp_path, caplog):
    """What a start stopped during set-up (SIGTERM, a late error) leaves: its config, its statistics, a stale lock."""
    run = tmp_path / "run"
    run.mkdir()
    for name in run_dir.SETUP_FILES:
        (run / name).write_text("{}\n")
    (run / "train.log").write_text("=== launcher log\n")
    (run / run_dir.LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": dead_pid(), "started": "x"}))
    with caplog.at_level(logging.WARNING):
        run_dir.claim_run_dir(run, is_resume=False, move_aside=False).release()
    assert f"{run} holds only the set-up files of a start that never trained (config.yaml, dataset_statistics.json" \
        in caplog.text and "reclaimed for this run" in caplog.text
    assert sorted(p.name for p in run.iterdir()) == ["train.log"]


def test_set_up_files_beside_metrics_are_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in (*run_dir.SETUP_FILES, "metrics.jsonl"):
        (run / name).write_text("{}\n")
    with pytest.raises(run_dir.RunDirError, match="already holds a run"):
        run_dir.claim_run_dir(run, is_resume=False, move_aside=False)
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "dataset_statistics.json", "metrics.jsonl"]


# --- trainer_state.json: its own fields are checked ------------------------------------------------------

def _edit_trainer_state(**fields):
    def edit(state: Path) -> None:
        trainer_state = ckpt.read_trainer_state(state)
        trainer_state.update(fields)
        (state / ckpt.TRAINER_STATE).write_text(json.dumps(trainer_state))
    return edit


@pytest.mark.parametrize("edit, problem", [
    (_edit_trainer_state(step=30), r"trainer_state\.json: step 30, but the folder is step 20"),
    (_edit_trainer_state(weights="steps_10_pytorch_model.pt"),
     r"weights 'steps_10_pytorch_model\.pt', but a state's weights are steps_20_pytorch_model\.pt beside it"),
    (_edit_trainer_state(weights="/etc/passwd"), r"weights '/etc/passwd', but a state's weights are"),
    (_edit_trainer_state(weights="../../outside.pt"), r"weights '\.\./\.\./outside\.pt', but"),
    (_edit_trainer_state(num_processes=2), r"trainer_state\.json: edited since it was written"),
], ids=["step", "older weights", "absolute weights", "weights outside the run dir", "process count"])
def test_an_edited_trainer_state_is_refused_and_the_previous_state_used(tmp_path, edit, problem):
    from accelerate import Accelerator

    checkpoints = tmp_path / "checkpoints"
    older, newer = published_state(checkpoints, 10), published_state(checkpoints, 20)
    trainer_state = ckpt.read_trainer_state(newer)
    trainer_state[ckpt.OWN_DIGEST] = ckpt.own_digest(trainer_state)  # as Checkpointer.save writes it
    (newer / ckpt.TRAINER_STATE).write_text(json.dumps(trainer_state))
    assert ckpt.verify_share(newer, 0, 1) == []
    edit(newer)
    problems = ckpt.verify_share(newer, 0, 1)
    assert any(re.search(problem, p) for p in problems), problems
    found = ckpt.Checkpointer(Accelerator(cpu=True), tmp_path, [], keep_last=2, waits=HostWaits(timedelta(seconds=60))).find(weights_only_fallback=False)
    assert (found.step, found.state, found.weights) == (10, older, checkpoints / "steps_10_pytorch_model.pt")


# --- a dataset is never a run dir ------------------------------------------------------------------------

@pytest.mark.parametrize("where, words", [
    ("root/set", "is a dataset"), ("root/set/runs/one", "is inside the dataset"), ("root", "holds the dataset"),
])
def test_a_run_dir_in_or_over_a_dataset_is_refused_and_nothing_written(tmp_path, where, words):
    dataset = tmp_path / "root" / "set"
    (dataset / "meta").mkdir(parents=True)
    (dataset / "meta/info.json").write_text("{}")
    before = sorted(tmp_path.rglob("*"))
    run = tmp_path / where
    with pytest.raises(run_dir.RunDirError, match=f"run dir {re.escape(str(run))} {words}.*nothing was written.*"
                                                  "--run_root_dir"):
        run_dir.claim_run_dir(run, is_resume=False, move_aside=True)
    assert sorted(tmp_path.rglob("*")) == before
