"""DiT4DiT/launch/values.py on its own: the values the launcher shows and uses, resolved from the real config files
with the forwarded options, each with its source, and the one-line errors for options and configs that do not load.
(tests/test_launch_plan.py checks how the plan and the dry run use them.)"""

from __future__ import annotations

import re

import pytest

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.launch.options import option_names
from DiT4DiT.launch.values import (
    COLLECTIVE_TIMEOUT_KEY, DETERMINISTIC_KEY, SHOWN, STALL_TIMEOUT_KEY, Value, resolve, source_of, unknown_option,
)
from helpers.fixtures_model import TINY_YAML

TINY = str(TINY_YAML)
TOP_LEVEL = {"seed", "run_id", "run_root_dir"}


def test_the_shown_keys_come_first_then_the_overridden_then_the_timeouts():
    forwarded = ["--trainer.save_interval=5", "--seed", "3", "--run_id=mine", "--trainer.logging_frequency=2",
                 "--framework.action_model.noise_s=0.9", "--datasets.vla_data.num_workers=0"]
    values = resolve(TINY, forwarded, option_names())
    overridden = ["datasets.vla_data.num_workers", "framework.action_model.noise_s", "seed",
                  "trainer.logging_frequency", "trainer.save_interval"]  # sorted, whatever order they were given in
    assert list(values) == [*SHOWN, *overridden, COLLECTIVE_TIMEOUT_KEY, STALL_TIMEOUT_KEY]
    assert all(isinstance(v, Value) and v.key == key for key, v in values.items())


def test_each_value_is_the_trainers_with_its_source():
    values = resolve(TINY, ["--trainer.max_train_steps", "7", "--datasets.vla_data.data_mix=robotwin_task1"],
                     option_names())
    assert values["trainer.max_train_steps"] == Value("trainer.max_train_steps", "7", "option")
    assert values["datasets.vla_data.data_mix"] == Value("datasets.vla_data.data_mix", "robotwin_task1", "option")
    assert values["run_id"] == Value("run_id", "dit4dit_tiny", "yaml")
    assert values["framework.cosmos25.base_model"] == Value(
        "framework.cosmos25.base_model", "playground/Pretrained_models/Cosmos-Predict2.5-tiny", "yaml")
    # keys the tiny YAML leaves out: the schema's defaults, as the trainer will read them
    assert values[DETERMINISTIC_KEY] == Value(DETERMINISTIC_KEY, "False", "default")
    assert values[COLLECTIVE_TIMEOUT_KEY] == Value(COLLECTIVE_TIMEOUT_KEY, "600", "default")
    assert values[STALL_TIMEOUT_KEY] == Value(STALL_TIMEOUT_KEY, "300", "default")


def test_an_overridden_timeout_is_the_options():
    values = resolve(TINY, [f"--{COLLECTIVE_TIMEOUT_KEY}=1200", f"--{STALL_TIMEOUT_KEY}=900"], option_names())
    assert values[COLLECTIVE_TIMEOUT_KEY] == Value(COLLECTIVE_TIMEOUT_KEY, "1200", "option")
    assert values[STALL_TIMEOUT_KEY] == Value(STALL_TIMEOUT_KEY, "900", "option")
    assert list(values).count(COLLECTIVE_TIMEOUT_KEY) == 1


def test_an_unset_value_is_empty_and_a_referenced_one_is_resolved(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("seed: 7\nrun_id: run_${seed}\ntrainer:\n  max_train_steps: 10\n")
    values = resolve(str(config), [], option_names())
    assert values["framework.cosmos25.base_model"] == Value("framework.cosmos25.base_model", "", "default")
    assert values["datasets.vla_data.data_root_dir"] == Value("datasets.vla_data.data_root_dir", "", "default")
    assert values["run_id"] == Value("run_id", "run_7", "yaml")
    assert values["run_root_dir"] == Value("run_root_dir", "./runs", "default")
    assert values[STALL_TIMEOUT_KEY].source == "default"  # the YAML has a trainer section, but not this key


@pytest.mark.parametrize("key, yaml_values, source", [
    ("seed", {"seed": 1}, "yaml"),
    ("seed", {}, "default"),
    ("trainer.max_train_steps", {"trainer": {"max_train_steps": 3}}, "yaml"),
    ("trainer.max_train_steps", {"trainer": {"save_interval": 3}}, "default"),
    ("trainer.max_train_steps", {"trainer": None}, "default"),  # `trainer:` with nothing under it
    ("trainer.max_train_steps", {"trainer": {"max_train_steps": None}}, "yaml"),  # set, to null
    ("framework.cosmos25.base_model", {"framework": {"cosmos25": {"base_model": "m"}}}, "yaml"),
    ("framework.cosmos25.base_model", {"framework": {"name": "DiT4DiT"}}, "default"),
])
def test_a_value_comes_from_the_yaml_only_where_the_yaml_sets_its_key(key, yaml_values, source):
    assert source_of(key, set(), yaml_values) == source
    assert source_of(key, {key}, yaml_values) == "option"


def test_an_undotted_name_must_be_an_option_or_a_top_level_key():
    options = option_names()
    assert unknown_option(["seed=3", "run_id=r", "trainer.anything=1", "a.b.c=1"], TOP_LEVEL, options) == ""
    assert unknown_option(["trainer.save_interval=1", "num_proceses=2"], TOP_LEVEL, options) == (
        "unknown option --num_proceses; did you mean --num_processes? (see --help); trainer config keys are dotted, "
        "e.g. --trainer.save_interval=1000")
    assert unknown_option(["sed=3"], TOP_LEVEL, options).startswith("unknown option --sed; did you mean --seed?")
    assert unknown_option(["zzzzqqq=1"], TOP_LEVEL, options) == (
        "unknown option --zzzzqqq (see --help); trainer config keys are dotted, e.g. --trainer.save_interval=1000")
    assert unknown_option(["first_bad=1", "second_bad=2"], TOP_LEVEL, []).startswith("unknown option --first_bad ")


def test_an_unknown_option_is_refused_before_the_config_is_checked():
    # The trainer key is bad too; the launcher's own name comes first, since that is what the user mistyped.
    with pytest.raises(ConfigError, match=re.escape("unknown option --num_proceses; did you mean --num_processes?")):
        resolve(TINY, ["--trainer.max_train_steps=0", "--num_proceses=2"], option_names())


@pytest.mark.parametrize("forwarded, words", [
    (["--trainer.max_train_steps=0"], "trainer.max_train_steps: must be at least 1"),
    (["--trainer.max_train_step=5"], "unknown config key 'trainer.max_train_step'"),
    (["--framework.action_model.action_horizon=16"], "action_horizon (16) must equal"),
    (["--datasets.vla_data.data_config=robotwn"], "datasets.vla_data.data_config='robotwn' is not a data config"),
    (["stray"], "command line: unexpected argument 'stray'; overrides look like --a.b.c value"),
])
def test_a_config_the_trainer_would_refuse_is_refused_here(forwarded, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        resolve(TINY, forwarded, option_names())


def test_data_configs_that_do_not_fit_the_widths_are_refused_here():
    # the check the trainer makes before reading any data (dataloader/config_checks.py), with the action chunk
    with pytest.raises(ConfigError, match=re.escape("data config 'robotwin' gives 14-dim actions, more than "
                                                    "datasets.vla_data.max_action_dim=4; set it to at least 14")):
        resolve(TINY, ["--datasets.vla_data.max_action_dim=4", "--framework.action_model.action_dim=4"], option_names())


def test_a_missing_yaml_is_named_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"--config_yaml {tmp_path / 'nope.yaml'}: no such file; pass a "
                                                    "YAML such as DiT4DiT/config/tiny/dit4dit_tiny.yaml")):
        resolve(str(tmp_path / "nope.yaml"), [], option_names())


def test_a_yaml_that_is_not_a_mapping_is_named(tmp_path):
    config = tmp_path / "list.yaml"
    config.write_text("- run_id: a\n")
    with pytest.raises(ConfigError, match=re.escape(f"{config}: the file is a list")):
        resolve(str(config), [], option_names())
