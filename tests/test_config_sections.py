"""The typed sections: generated from the schema and current, one typed field per key, filled from a loaded config."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from DiT4DiT.config import sections
from DiT4DiT.config.schema import KNOWN_KEYS, OPEN_NODES, load_config
from DiT4DiT.config.typed import render, section

ROOT = Path(__file__).resolve().parents[1]
ROBOTWIN = "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"


def test_the_checked_in_sections_are_what_the_schema_generates():
    assert (ROOT / "DiT4DiT/config/sections.py").read_text() == render(), (
        "stale: python -m DiT4DiT.config.typed > DiT4DiT/config/sections.py")


def _paths(cls, prefix=""):
    hints = typing.get_type_hints(cls, vars(sections))
    for field in dataclasses.fields(cls):
        path = prefix + field.name
        if dataclasses.is_dataclass(hints[field.name]):
            yield from _paths(hints[field.name], path + ".")
        else:
            yield path


def test_every_key_is_a_field_and_every_field_a_key():
    known = {k for k in KNOWN_KEYS if not k.startswith(tuple(p + "." for p in OPEN_NODES))} | set(OPEN_NODES)
    assert set(_paths(sections.ConfigSections)) == known


def test_a_loaded_config_fills_its_sections_frozen():
    cfg = load_config(ROBOTWIN, ["trainer.learning_rate.action_model=3e-4"])
    whole = section(cfg, sections.ConfigSections)
    trainer = section(cfg.trainer, sections.TrainerSection)
    assert whole.trainer == trainer
    assert trainer.learning_rate["action_model"] == 3e-4 and trainer.optimizer.betas == [0.9, 0.95]
    assert whole.datasets.vla_data.per_device_batch_size == cfg.datasets.vla_data.per_device_batch_size
    assert whole.framework.cosmos25.flow_matching.high_sigma_min == 0.98
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainer.max_train_steps = 1
