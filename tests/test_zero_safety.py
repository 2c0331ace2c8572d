"""ZeRO-1/2 overlap_comm against the installed DeepSpeed: safe configs pass, unsafe ones are corrected or kept on request."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
from packaging.version import Version

from DiT4DiT.training.zero_safety import FIRST_SAFE, installed_deepspeed, make_overlap_safe

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = json.loads((ROOT / "DiT4DiT/config/deepseeds/ds_zero2.json").read_text())
PINNED = Version("0.16.9")


def with_zero(stage: int, overlap) -> dict:
    config = copy.deepcopy(SHIPPED)
    config["zero_optimization"]["stage"] = stage
    config["zero_optimization"]["overlap_comm"] = overlap
    return config


def test_the_pinned_deepspeed_is_the_one_installed():
    # The other tests use the pin; this one ties it to what the suite really runs with.
    assert installed_deepspeed() == PINNED < FIRST_SAFE


@pytest.mark.parametrize("config, version", [
    (SHIPPED, PINNED),  # the shipped ZeRO-2 config has overlap off
    (with_zero(2, True), FIRST_SAFE),  # a DeepSpeed with the fixes
    (with_zero(3, True), PINNED),  # ZeRO-3 reduces in stage3.py, another path
    (with_zero(2, None), PINNED),  # DeepSpeed's own default is off for stage 1/2
])
def test_a_safe_combination_is_left_as_it_is(config, version, caplog):
    before = copy.deepcopy(config)
    assert make_overlap_safe(config, allow_unsafe=False, deepspeed_version=version) is False
    assert config == before and not caplog.records


@pytest.mark.parametrize("stage", [1, 2])
def test_overlap_on_a_deepspeed_without_the_fix_is_turned_off_with_one_warning(stage, caplog):
    config = with_zero(stage, True)
    with caplog.at_level(logging.WARNING):
        assert make_overlap_safe(config, allow_unsafe=False, deepspeed_version=PINNED) is True
    assert config["zero_optimization"]["overlap_comm"] is False
    (record,) = caplog.records
    assert f"ZeRO-{stage} overlap_comm turned off: DeepSpeed 0.16.9" in record.message
    assert "PR #7965" in record.message and "--trainer.allow_unsafe_zero_overlap true" in record.message


def test_the_expert_key_keeps_overlap_on_with_a_warning(caplog):
    config = with_zero(2, True)
    with caplog.at_level(logging.WARNING):
        assert make_overlap_safe(config, allow_unsafe=True, deepspeed_version=PINNED) is False
    assert config["zero_optimization"]["overlap_comm"] is True
    (record,) = caplog.records
    assert "stays on" in record.message and "silently wrong" in record.message


def test_the_installed_deepspeed_is_what_is_checked_by_default():
    config = with_zero(2, True)
    assert make_overlap_safe(config, allow_unsafe=False) is (installed_deepspeed() < FIRST_SAFE)
