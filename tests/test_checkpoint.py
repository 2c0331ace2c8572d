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
