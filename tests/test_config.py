"""The config tree: strict keys with closest-name errors, CLI override forms, cross-key validation."""

import pytest

from DiT4DiT.config.schema import ConfigError, KNOWN_KEYS, default_config, load_config, normalize_cli_overrides
from DiT4DiT.config.validate import validate_training_config

ROBOTWIN = "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"


def test_every_default_key_has_a_meaning():
    assert all(key.help.strip() for key in KNOWN_KEYS.values())
    assert default_config().framework.cosmos25.extract_layer == 17


@pytest.mark.parametrize(
    "tokens, expected",
    [
        (["--trainer.max_train_steps", "7"], ["trainer.max_train_steps=7"]),
        (["--trainer.max_train_steps=7"], ["trainer.max_train_steps=7"]),
        (["--trainer.is_resume"], ["trainer.is_resume=true"]),
        (["--a.b", "--c.d=1"], ["a.b=true", "c.d=1"]),
    ],
)
def test_cli_override_forms(tokens, expected):
    assert normalize_cli_overrides(tokens) == expected


def test_stray_positional_argument_is_an_error():
    with pytest.raises(ConfigError, match="unexpected argument 'oops'"):
        normalize_cli_overrides(["--a.b", "1", "oops"])


def test_overrides_are_typed_and_win_over_the_yaml():
    cfg = load_config(ROBOTWIN, normalize_cli_overrides(["--trainer.max_train_steps", "7", "--framework.cosmos25.base_model=null"]))
    assert cfg.trainer.max_train_steps == 7
    assert cfg.framework.cosmos25.base_model is None
    assert cfg.datasets.vla_data.data_mix == "robotwin"


def test_misspelled_cli_key_names_the_closest_valid_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer\.max_train_step'\. Did you mean 'trainer\.max_train_steps'"):
        load_config(ROBOTWIN, ["trainer.max_train_step=5"])


def test_misspelled_yaml_key_names_the_file_and_closest_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("framework:\n  cosmos25:\n    extract_layr: 3\n")
    with pytest.raises(ConfigError, match=rf"{bad}: unknown config key 'framework\.cosmos25\.extract_layr'.*'framework\.cosmos25\.extract_layer'"):
        load_config(bad)


def test_the_originals_dead_key_is_rejected():
    # The original's launch scripts pass this wrong path and it silently does nothing there.
    with pytest.raises(ConfigError, match="Did you mean 'framework.cosmos25.conditional_frame_timestep'"):
        load_config(ROBOTWIN, ["trainer.framework.cosmos25.conditional_frame_timestep=0.0001"])


def test_learning_rate_groups_accept_user_named_modules():
    cfg = load_config(ROBOTWIN, ["trainer.learning_rate.my_adapter=3e-4"])
    assert cfg.trainer.learning_rate.my_adapter == 3e-4


def test_missing_yaml_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


def _valid(tmp_path, *overrides):
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "data").mkdir(exist_ok=True)
    return load_config(ROBOTWIN, [f"framework.cosmos25.base_model={tmp_path / 'model'}",
                                  f"datasets.vla_data.data_root_dir={tmp_path / 'data'}", *overrides])


def test_a_valid_config_passes(tmp_path):
    validate_training_config(_valid(tmp_path))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer.is_resume=true", "trainer.move_old_run=true"], "move_old_run and trainer.is_resume are both set"),
        (["trainer.resume_weights_only=true"], "resume_weights_only only applies with --trainer.is_resume true"),
        (["framework.cosmos25.base_model=/no/such/model"], "huggingface-cli download nvidia/Cosmos-Predict2.5-2B"),
        (["framework.cosmos25.base_model=null"], "framework.cosmos25.base_model is not set"),
        (["datasets.vla_data.data_root_dir=/no/such/data"], r"data_root_dir: folder '/no/such/data' does not exist"),
        (["datasets.vla_data.data_root_dir=null"], "data_root_dir is not set"),
        (["framework.action_model.action_dim=32"], "must equal datasets.vla_data.max_action_dim"),
        (["framework.action_model.action_horizon=16"], r"action_horizon \(16\) must equal"),
        (["framework.cosmos25.training=both"], "is not one of"),
        (["trainer.max_train_steps=0"], "must be a positive integer"),
    ],
)
def test_cross_key_problems_are_named(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_training_config(_valid(tmp_path, *overrides))


def test_a_warm_up_longer_than_the_run_is_a_warning_not_an_error(tmp_path):
    warnings = validate_training_config(_valid(tmp_path, "trainer.max_train_steps=100", "trainer.save_interval=100"))
    assert warnings == ["trainer.num_warmup_steps (5000) exceeds trainer.max_train_steps (100): "
                        "the learning rate never reaches its peak in this run"]


def test_values_take_the_type_of_their_default():
    cfg = load_config(ROBOTWIN, ["trainer.loss_scale.future_video=inf", "trainer.learning_rate.base=1e-4",
                                 "trainer.max_train_steps=10.0"])
    assert cfg.trainer.loss_scale.future_video == float("inf")
    assert cfg.trainer.learning_rate.base == 1e-4 and isinstance(cfg.trainer.max_train_steps, int)


@pytest.mark.parametrize("override, message", [
    ("trainer.max_train_steps=ten", "trainer.max_train_steps: expected a number, got 'ten'"),
    ("trainer.max_train_steps=2.5", "trainer.max_train_steps: expected an integer"),
    ("trainer.is_resume=maybe", "trainer.is_resume: expected true or false"),
])
def test_values_of_the_wrong_type_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROBOTWIN, [override])


def test_save_interval_longer_than_the_run_is_a_warning(tmp_path):
    warnings = validate_training_config(_valid(tmp_path, "trainer.save_interval=200", "trainer.max_train_steps=100",
                                               "trainer.num_warmup_steps=10"))
    assert warnings == ["trainer.save_interval (200) is larger than the run (trainer.max_train_steps=100): only the "
                        "final checkpoint (step 100) is written"]


def test_a_numeric_run_id_is_a_name(tmp_path):
    from_cli = load_config(ROBOTWIN, normalize_cli_overrides(["--run_id=20250101"]))
    config = tmp_path / "numeric.yaml"
    config.write_text("run_id: 20250101\n")
    assert from_cli.run_id == "20250101" and load_config(config).run_id == "20250101"


def test_a_valueless_run_id_is_an_error():
    with pytest.raises(ConfigError, match=r"run_id: expected text, got true; give it a value, e.g. --run_id=NAME"):
        load_config(ROBOTWIN, normalize_cli_overrides(["--run_id", "--seed=1"]))
