"""Atomic run-directory writes and the training-state life cycle."""

import json
import random

import numpy as np
import pytest
import torch

from DiT4DiT.training import checkpoint as ckpt


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "weights.pt"
    ckpt.save_weights({"w": torch.ones(2)}, target)

    def crash(tmp):
        tmp.write_bytes(b"half a checkpoint")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ckpt.atomic_write(target, crash)
    assert torch.equal(ckpt.load_weights(target)["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["weights.pt"]


def test_frozen_modules_are_left_out_of_saved_weights():
    state = {"backbone_interface.extractor.vae.w": torch.ones(1), "backbone_interface.extractor.vaex.w": torch.ones(1),
             "action_model.w": torch.ones(1)}
    kept = ckpt.weights_to_save(state, ["backbone_interface.extractor.vae"])
    assert sorted(kept) == ["action_model.w", "backbone_interface.extractor.vaex.w"]


def _write_state(checkpoints, step, keep_last):
    staging = ckpt.staging_dir(checkpoints, step)
    ckpt.save_rank_state(staging, 0, torch.device("cpu"))
    return ckpt.publish_state(checkpoints, step, {"step": step}, keep_last=keep_last)


def test_only_published_states_count_and_old_ones_are_pruned(tmp_path):
    for step in (10, 20, 30):
        _write_state(tmp_path, step, keep_last=2)
    ckpt.staging_dir(tmp_path, 40).mkdir()  # a save killed half-way
    states = ckpt.completed_states(tmp_path)
    assert [p.name for p in states] == ["steps_20_training_state", "steps_30_training_state"]
    assert ckpt.read_trainer_state(states[-1]) == {"step": 30}


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    state = _write_state(tmp_path, 1, keep_last=1)
    expected = (random.random(), float(np.random.rand()), torch.rand(3))
    ckpt.load_rank_rng(state, 0, torch.device("cpu"))
    again = (random.random(), float(np.random.rand()), torch.rand(3))
    assert expected[:2] == again[:2] and torch.equal(expected[2], again[2])


def test_resuming_with_another_process_count_is_explained(tmp_path):
    state = _write_state(tmp_path, 1, keep_last=1)
    with pytest.raises(FileNotFoundError, match="same --num_processes"):
        ckpt.load_rank_rng(state, 1, torch.device("cpu"))


def test_summary_lists_every_saved_step(tmp_path):
    ckpt.append_summary(tmp_path, 10)
    ckpt.append_summary(tmp_path, 20)
    lines = (tmp_path / "summary.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"steps": 10}, {"steps": 20}]


# --- the Checkpointer: save, find, verify, restore, final model (one process, as accelerate runs it on a CPU) ----

class Policy(torch.nn.Module):
    """A frozen part (left out of checkpoints, as a frozen VAE is) and a trained one."""

    def __init__(self):
        super().__init__()
        self.frozen = torch.nn.Linear(2, 2)
        self.action_model = torch.nn.Linear(2, 1)


@pytest.fixture
def checkpointer(tmp_path):
    from datetime import timedelta

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    from DiT4DiT.training.host_waits import HostWaits

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True)

    def make(keep_last: int = 2) -> ckpt.Checkpointer:
        return ckpt.Checkpointer(accelerator, tmp_path, ["frozen"], keep_last, HostWaits(timedelta(seconds=60)))

    yield make
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def trained_parts():
    torch.manual_seed(0)
    model = Policy()
    optimizer = torch.optim.AdamW(model.action_model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model.action_model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def test_a_saved_state_is_found_with_its_step_weights_and_process_count(checkpointer, tmp_path):
    saver = checkpointer()
    model, optimizer, scheduler = trained_parts()
    state = saver.save(3, model, optimizer, scheduler)
    assert state == saver.state_dir(3) == tmp_path / "checkpoints" / "steps_3_training_state"
    resume = saver.find(weights_only_fallback=False)
    assert (resume.step, resume.weights, resume.state, resume.num_processes) == (
        3, tmp_path / "checkpoints" / "steps_3_pytorch_model.pt", state, 1)
    assert not resume.weights_only
    assert sorted(ckpt.load_weights(resume.weights)) == ["action_model.bias", "action_model.weight"]
    assert json.loads((tmp_path / "summary.jsonl").read_text()) == {"steps": 3}


def test_restore_brings_back_the_optimizer_and_the_schedule(checkpointer):
    saver = checkpointer()
    model, optimizer, scheduler = trained_parts()
    state = saver.save(1, model, optimizer, scheduler)
    fresh = torch.optim.AdamW(model.action_model.parameters(), lr=0.1)
    fresh_schedule = torch.optim.lr_scheduler.StepLR(fresh, step_size=1, gamma=0.5)
    saver.restore(state, model, fresh, fresh_schedule)
    saved = optimizer.state_dict()["state"][0]
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], saved["exp_avg"])
    assert fresh_schedule.state_dict()["last_epoch"] == 1 and fresh.param_groups[0]["lr"] == pytest.approx(0.05)


def test_a_state_that_fails_its_manifest_falls_back_to_the_previous_one(checkpointer):
    saver = checkpointer(keep_last=3)
    model, optimizer, scheduler = trained_parts()
    saver.save(1, model, optimizer, scheduler)
    newer = saver.save(2, model, optimizer, scheduler)
    (newer / "optimizer.pt").write_bytes(b"bit rot")
    assert saver.find(weights_only_fallback=False).step == 1


def test_without_a_state_find_says_how_to_go_on_or_takes_the_newest_weights(checkpointer, tmp_path):
    saver = checkpointer()
    with pytest.raises(ckpt.ResumeError, match="--trainer.resume_weights_only true"):
        saver.find(weights_only_fallback=False)
    with pytest.raises(ckpt.ResumeError, match="holds no steps_N_pytorch_model.pt"):
        saver.find(weights_only_fallback=True)
    ckpt.save_weights({"action_model.weight": torch.zeros(1, 2)}, ckpt.weights_path(tmp_path / "checkpoints", 5))
    resume = saver.find(weights_only_fallback=True)
    assert (resume.step, resume.state, resume.weights_only) == (5, None, True)


def test_keep_last_prunes_older_states_but_keeps_every_weights_file(checkpointer, tmp_path):
    saver = checkpointer(keep_last=1)
    model, optimizer, scheduler = trained_parts()
    for step in (1, 2):
        saver.save(step, model, optimizer, scheduler)
    assert [p.name for p in ckpt.completed_states(tmp_path / "checkpoints")] == ["steps_2_training_state"]
    assert ckpt.newest_weights(tmp_path / "checkpoints") == (2, ckpt.weights_path(tmp_path / "checkpoints", 2))
    assert ckpt.weights_path(tmp_path / "checkpoints", 1).is_file()


def test_the_final_model_leaves_the_frozen_modules_out(checkpointer, tmp_path):
    model, _, _ = trained_parts()
    path = checkpointer().save_final(model)
    assert path == tmp_path / "final_model" / "pytorch_model.pt"
    assert sorted(ckpt.load_weights(path)) == ["action_model.bias", "action_model.weight"]


def test_saving_and_loading_weights_cover_a_module_as_facts_is_under_does():
    """The module-prefix rule has one home (facts.is_under): what a checkpoint leaves out and what a load lets be
    missing are the same keys, "vae" covering "vae" and "vae.weight" but not "vae_extra.weight"."""
    from torch import nn

    from DiT4DiT.facts import is_under
    from DiT4DiT.model.modules.weights import CheckpointMismatchError, load_trained_weights

    model = nn.ModuleDict({"vae": nn.Linear(1, 1), "vae_extra": nn.Linear(1, 1)})
    state = model.state_dict()
    kept = ckpt.weights_to_save(state, ["vae"])
    assert set(kept) == {k for k in state if not is_under(k, ["vae"])} == {"vae_extra.weight", "vae_extra.bias"}
    load_trained_weights(model, kept, "kept.pt", may_be_missing=["vae"])
    with pytest.raises(CheckpointMismatchError, match="vae_extra"):
        load_trained_weights(model, {k: v for k, v in state.items() if k.startswith("vae.")}, "vae.pt",
                             may_be_missing=["vae"])


def test_a_folder_not_named_as_a_training_state_is_one_problem(tmp_path):
    # It raised AttributeError on the name's failed match (the trainer only passes published states' folders).
    folder = tmp_path / "steps_x_training_state"
    assert ckpt.trainer_state_problems(folder, {"step": 1}) == [
        f"{folder}: not a training state's folder (steps_N_training_state)"]
