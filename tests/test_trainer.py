"""The Trainer (training/trainer.py), in this process on the tiny model and data: what it builds, the steps it
hands out, the bookkeeping after each step, the final model and the resume; its helpers; and the start-up line
that says what is on (frozen modules, activation checkpointing, deterministic kernels)."""

from __future__ import annotations

import json

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.model.framework import build_framework
from DiT4DiT.training import checkpoint as ckpt
from DiT4DiT.training.train import build_optimizer, parse_config, train_step
from DiT4DiT.training.trainer import (Trainer, build_accelerator, due, fixed_eval_batch, load_pretrained, what_is_on)

from helpers.training_runs import metrics, trainer_arguments


def test_the_start_up_line_names_checkpointed_blocks_frozen_modules_and_determinism(tiny_model_cfg):
    cfg = tiny_model_cfg("trainer.enable_gradient_checkpointing=true", "trainer.deterministic=true",
                         "trainer.freeze_modules=backbone_interface.extractor.vae")
    line = what_is_on(build_framework(cfg), cfg.trainer)
    assert line == ("frozen modules: backbone_interface.extractor.vae (trainer.freeze_modules) | activation "
                    "checkpointing: on for backbone_interface.extractor.transformer (4 blocks), action_model.model "
                    "(2 blocks) (trainer.enable_gradient_checkpointing) | deterministic kernels: on "
                    "(trainer.deterministic)")


def test_the_start_up_line_says_off_and_none(tiny_model_cfg):
    cfg = tiny_model_cfg("trainer.freeze_modules=null")
    line = what_is_on(build_framework(cfg), cfg.trainer)
    assert "frozen modules: none" in line and "activation checkpointing: off" in line
    assert "deterministic kernels: off" in line


@pytest.mark.xdist_group("launcher_run")  # the session's one launcher training
def test_a_real_run_logs_the_line(launcher_run):
    result = launcher_run[0]
    (line,) = [line for line in (result.stdout + result.stderr).splitlines() if "activation checkpointing:" in line]
    assert "frozen modules: " in line and "activation checkpointing: off" in line
    assert "deterministic kernels: off (trainer.deterministic)" in line


# --- the Trainer itself ------------------------------------------------------------------------------------------

@pytest.fixture
def trainers(tiny_pipeline_dir, tiny_robotwin_root, one_torch_thread, tmp_path):
    """trainers(*overrides) -> a prepared Trainer of the tiny config on run dir tmp_path/runs/unit (one process)."""
    made = []

    def make(*overrides: str) -> Trainer:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        cfg = parse_config(trainer_arguments(tiny_pipeline_dir, tiny_robotwin_root, tmp_path / "runs", "unit",
                                             "--trainer.mixed_precision=no", *overrides))
        accelerator = build_accelerator(cfg)
        cfg.run_dir.mkdir(parents=True, exist_ok=True)  # what run_dir.claimed does before the Trainer
        trainer = Trainer(cfg, accelerator)
        trainer.prepare(build_optimizer(trainer.model, trainer.settings))
        made.append(trainer)
        return trainer

    yield make
    for trainer in made:
        trainer.batches.close()
        if trainer.logger is not None:
            trainer.logger.close()
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def train(trainer: Trainer) -> None:
    """The loop train.py runs, around the Trainer's methods."""
    with trainer.running():
        for step, micro_batches in trainer.steps():
            trainer.after_step(step, train_step(micro_batches, step, model=trainer.model, optimizer=trainer.optimizer,
                                                scheduler=trainer.scheduler, accelerator=trainer.accelerator,
                                                settings=trainer.settings, batch_order=trainer.batch_order))


def test_prepare_writes_the_run_dirs_first_files_and_the_steps_hand_out_micro_batches(trainers):
    trainer = trainers("--trainer.max_train_steps=3", "--trainer.gradient_accumulation_steps=2",
                       "--datasets.vla_data.per_device_batch_size=2")
    assert trainer.start_step == 0 and trainer.resume is None
    assert {"config.yaml", "dataset_statistics.json"} <= {p.name for p in trainer.run_dir.iterdir()}
    handed = [(step, [len(batch) for batch in micro_batches]) for step, micro_batches in trainer.steps()]
    assert handed == [(0, [2, 2]), (1, [2, 2]), (2, [2, 2])]
    assert trainer.unwrapped is trainer.model  # one CPU process: nothing wraps it


@pytest.mark.slow  # a few training steps, seconds
def test_a_run_logs_every_step_saves_at_the_interval_and_ends_with_the_final_model(trainers):
    trainer = trainers("--trainer.max_train_steps=3", "--trainer.save_interval=2", "--trainer.logging_frequency=1",
                       "--trainer.eval_interval=3")
    train(trainer)
    run = trainer.run_dir
    assert [p.name for p in ckpt.completed_states(run / "checkpoints")] == ["steps_2_training_state",
                                                                            "steps_3_training_state"]
    assert (run / "final_model" / "pytorch_model.pt").is_file()
    records = metrics(run)
    assert [r["step"] for r in records if "total_loss" in r] == [1, 2, 3]
    assert [r["step"] for r in records if "eval_action_mse" in r] == [3]
    assert [json.loads(line) for line in (run / "summary.jsonl").read_text().splitlines()] == [{"steps": 2}, {"steps": 3}]


@pytest.mark.slow  # a few training steps, seconds
def test_a_resumed_trainer_starts_at_the_saved_step_with_the_saved_optimizer(trainers):
    first = trainers("--trainer.max_train_steps=2", "--trainer.save_interval=2")
    train(first)
    saved = first.optimizer.state_dict()["state"]
    again = trainers("--trainer.max_train_steps=4", "--trainer.save_interval=2", "--trainer.is_resume=true")
    assert again.start_step == 2 and again.resume.state == first.checkpointer.state_dir(2)
    restored = again.optimizer.state_dict()["state"]
    assert restored.keys() == saved.keys()
    assert all(torch.equal(restored[k]["exp_avg"], saved[k]["exp_avg"]) for k in saved)
    assert [step for step, _ in again.steps()] == [2, 3]


# --- its helpers -------------------------------------------------------------------------------------------------

def test_due_on_the_interval_and_at_the_last_step():
    assert [done for done in range(1, 8) if due(done, 3, 7)] == [3, 6, 7]


def test_the_eval_batch_is_the_same_samples_for_a_seed_and_leaves_the_global_rng_alone():
    eval_set = [{"action": torch.full((1,), float(i))} for i in range(10)]
    torch.manual_seed(5)
    expected_next = torch.rand(1)
    torch.manual_seed(5)
    first = fixed_eval_batch(eval_set, 4, seed=3)
    assert torch.equal(torch.rand(1), expected_next)
    assert [float(e["action"]) for e in first] == [float(e["action"]) for e in fixed_eval_batch(eval_set, 4, seed=3)]
    assert len(first) == 4


def test_reload_modules_that_the_checkpoint_does_not_hold_are_named(tmp_path):
    model = torch.nn.Module()
    model.action_model = torch.nn.Linear(2, 1)
    ckpt.save_weights({"action_model.weight": torch.zeros(1, 2), "action_model.bias": torch.zeros(1)},
                      tmp_path / "w.pt")
    with pytest.raises(ConfigError, match=r"trainer.reload_modules: .*w.pt holds no weights under \['backbone'\]"):
        load_pretrained(model, str(tmp_path / "w.pt"), "backbone", [])
    load_pretrained(model, str(tmp_path / "w.pt"), "action_model", [])
    assert torch.equal(model.action_model.weight, torch.zeros(1, 2))
