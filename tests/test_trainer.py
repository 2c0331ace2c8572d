"""The Trainer's start-up lines say what is on: the frozen modules, activation checkpointing (which modules' blocks)
and deterministic kernels."""

from __future__ import annotations

import pytest

from DiT4DiT.config.sections import TrainerSection
from DiT4DiT.config.typed import section
from DiT4DiT.model.framework import build_framework
from DiT4DiT.training.trainer import what_is_on


def test_the_start_up_line_names_checkpointed_blocks_frozen_modules_and_determinism(tiny_model_cfg):
    cfg = tiny_model_cfg("trainer.enable_gradient_checkpointing=true", "trainer.deterministic=true",
                         "trainer.freeze_modules=backbone_interface.extractor.vae")
    line = what_is_on(build_framework(cfg), section(cfg.trainer, TrainerSection))
    assert line == ("frozen modules: backbone_interface.extractor.vae (trainer.freeze_modules) | activation "
                    "checkpointing: on for backbone_interface.extractor.transformer (4 blocks), action_model.model "
                    "(2 blocks) (trainer.enable_gradient_checkpointing) | deterministic kernels: on "
                    "(trainer.deterministic)")


def test_the_start_up_line_says_off_and_none(tiny_model_cfg):
    cfg = tiny_model_cfg("trainer.freeze_modules=null")
    line = what_is_on(build_framework(cfg), section(cfg.trainer, TrainerSection))
    assert "frozen modules: none" in line and "activation checkpointing: off" in line
    assert "deterministic kernels: off" in line


@pytest.mark.xdist_group("launcher_run")  # the session's one launcher training
def test_a_real_run_logs_the_line(launcher_run):
    result = launcher_run[0]
    (line,) = [line for line in (result.stdout + result.stderr).splitlines() if "activation checkpointing:" in line]
    assert "frozen modules: " in line and "activation checkpointing: off" in line
    assert "deterministic kernels: off (trainer.deterministic)" in line
