"""The config tree: typed keys with their choices and bounds, strict keys with closest-name errors, the original's
files and flags, CLI override forms, and every cross-key rule, all checked by load_config."""

import warnings

import pytest
import yaml
from omegaconf.errors import ReadonlyConfigError

from DiT4DiT.config.schema import (
    KNOWN_KEYS, RECORDED_FOR_THE_ORIGINAL, UNUSED_BY_THE_ORIGINAL, ConfigError, OriginalKeysWarning, default_config,
    load_config, normalize_cli_overrides,
)
from DiT4DiT.config.keys import Key, coerce
from DiT4DiT.training.input_checks import validate_training_config
from helpers.fixtures_model import TINY_BACKBONE

ROBOTWIN = "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"
TINY = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"

# The original's LIBERO config (DiT4DiT/config/libero/dit4dit_libero.yaml upstream): its keys and values.
ORIGINAL_LIBERO = {
    "run_id": "dit4dit", "run_root_dir": "results/Checkpoints", "seed": 42, "trackers": ["jsonl", "wandb"],
    "wandb_entity": "your_wandb_entity", "wandb_project": "DiT4DiT", "is_debug": False,
    "framework": {
        "name": "DiT4DiT",
        "cosmos25": {
            "future_num_inference_steps": 1, "future_loss_type": "flow_matching", "extract_layer": 17,
            "base_model": "/path/to/Cosmos-Predict2.5-2B", "attn_implementation": "flash_attention_2",
            "vl_hidden_dim": 2048, "training": "joint", "conditional_frame_timestep": 0.0001,
            "flow_matching": {"time_distribution": "logit_normal", "high_sigma_ratio": 0.05, "high_sigma_min": 0.98},
        },
        "action_model": {
            "action_model_type": "DiT-B", "hidden_size": 2560, "add_pos_embed": True, "max_seq_len": 1024,
            "action_dim": 8, "state_dim": 16, "future_action_window_size": 7, "action_horizon": 8,
            "past_action_window_size": 0, "repeated_diffusion_steps": 8, "noise_beta_alpha": 1.5,
            "noise_beta_beta": 1.0, "noise_s": 0.999, "num_timestep_buckets": 1000, "num_inference_timesteps": 4,
            "num_target_vision_tokens": 32,
            "diffusion_model_cfg": {
                "cross_attention_dim": 2048, "dropout": 0.2, "final_dropout": True, "interleave_self_attention": True,
                "norm_type": "ada_norm", "num_layers": 16, "output_dim": 2560, "positional_embeddings": None,
            },
        },
    },
    "datasets": {"vla_data": {
        "dataset_py": "lerobot_datasets", "data_root_dir": "/path/to/dataset/libero", "data_mix": "libero_all",
        "include_state": True, "action_type": "joint_position", "default_image_resolution": [3, 224, 224],
        "per_device_batch_size": 16, "load_all_data_for_training": True, "obs": ["image_0"], "image_size": [224, 224],
        "delete_pause_frame": False, "video_delta_indices": [0, 1, 2, 3, 4, 5, 6, 7, 8], "max_state_dim": 16,
        "max_action_dim": 8, "action_video_freq_ratio": 2, "video_backend": "torchvision_av",
    }},
    "trainer": {
        "epochs": 100, "max_train_steps": 100000, "num_warmup_steps": 5000, "save_interval": 5000, "eval_interval": 100,
        "learning_rate": {"base": "1e-05", "backbone_interface": 1.0e-05, "action_model": 1.0e-04},
        "lr_scheduler_type": "cosine_with_min_lr", "scheduler_specific_kwargs": {"min_lr": 5.0e-07},
        "freeze_modules": "", "repeated_diffusion_steps": 4, "max_grad_norm": 1.0, "warmup_ratio": 0.1,
        "weight_decay": 0.0, "logging_frequency": 10, "gradient_clipping": 1.0, "gradient_accumulation_steps": 1,
        "optimizer": {"name": "AdamW", "betas": [0.9, 0.95], "eps": 1.0e-08, "weight_decay": 1.0e-08},
        "is_resume": False, "resume_epoch": None, "resume_step": None, "enable_gradient_checkpointing": True,
        "enable_mixed_precision_training": True,
    },
}

# The overrides of the original's examples/LIBERO/train_files/run_libero.sh, in its order and spelling.
ORIGINAL_LIBERO_FLAGS = [
    "--framework.name", "DiT4DiT",
    "--framework.cosmos25.base_model", "/path/to/Cosmos-Predict2.5-2B",
    "--framework.action_model.action_model_type", "DiT-B",
    "--datasets.vla_data.data_root_dir", "/path/to/libero/dataset",
    "--datasets.vla_data.data_mix", "libero_all",
    "--datasets.vla_data.per_device_batch_size", "4",
    "--trainer.freeze_modules", "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae",
    "--trainer.max_train_steps", "80000",
    "--trainer.save_interval", "40000",
    "--trainer.logging_frequency", "10",
    "--trainer.eval_interval", "100",
    "--trainer.learning_rate.backbone_interface", "1e-5",
    "--trainer.learning_rate.action_model", "1e-4",
    "--trainer.num_warmup_steps", "5000",
    "--framework.cosmos25.extract_layer", "17",
    "--framework.cosmos25.flow_matching.time_distribution", "uniform",
    "--framework.cosmos25.flow_matching.high_sigma_ratio", "null",
    "--framework.cosmos25.flow_matching.high_sigma_min", "null",
    "--trainer.framework.cosmos25.conditional_frame_timestep", "0.0001",
    "--datasets.vla_data.action_video_freq_ratio", "2",
    "--run_root_dir", "./playground/Checkpoints_libero",
    "--run_id", "dit4dit_libero_all",
    "--wandb_project", "DiT4DiT_libero",
    "--wandb_entity", "your_wandb_entity",
]


def _original_yaml(tmp_path):
    path = tmp_path / "dit4dit_libero.yaml"
    path.write_text(yaml.safe_dump(ORIGINAL_LIBERO, sort_keys=False))
    return path


def _load_recording(*args):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cfg = load_config(*args)
    return cfg, [str(w.message) for w in record if issubclass(w.category, OriginalKeysWarning)]


def test_a_key_declared_with_default_and_help_only_takes_its_defaults_type():
    assert coerce("a.n", Key(3, "a count"), "7") == (7, None)
    assert coerce("a.x", Key(0.5, "a rate"), "1e-3") == (0.001, None)
    assert coerce("a.b", Key(False, "a switch"), True) == (True, None)
    assert coerce("a.p", Key(None, "anything, or null"), 5) == (5, None)
    with pytest.raises(ConfigError, match="a.n: expected a number, got 'x'"):
        coerce("a.n", Key(3, "a count"), "x")


def test_every_key_has_a_meaning_and_the_originals_defaults():
    assert all(key.help.strip() for key in KNOWN_KEYS.values())
    defaults = default_config()
    cosmos, data = defaults.framework.cosmos25, defaults.datasets.vla_data
    assert (cosmos.extract_layer, cosmos.conditional_frame_timestep, cosmos.future_loss_type) == (19, 0.001, "pixel_l1")
    assert (data.max_state_dim, data.max_action_dim) == (64, 32)


def test_our_yamls_keep_their_values_explicitly():
    for path in (ROBOTWIN, TINY):
        cosmos = load_config(path).framework.cosmos25
        assert (cosmos.extract_layer, cosmos.future_loss_type) == ((17 if path == ROBOTWIN else 2), "flow_matching")
        assert cosmos.conditional_frame_timestep == 0.0001


def test_the_originals_yaml_loads_with_one_warning_listing_its_unread_keys(tmp_path):
    cfg, messages = _load_recording(_original_yaml(tmp_path))
    unread = [m for m in messages if "not used, as in the original" in m]
    assert len(unread) == 1
    for key in ("is_debug", "trainer.epochs", "datasets.vla_data.obs", "framework.action_model.repeated_diffusion_steps",
                "trainer.optimizer.name", "trainer.enable_mixed_precision_training", "datasets.vla_data.default_image_resolution"):
        assert key in unread[0]
    listed = unread[0].split("not used, as in the original: ")[1].split(", ")
    # Every unread key the original's LIBERO YAML carries (lerobot_version it does not carry); the keys the original
    # reads and this trainer does not are accepted without a word (and recorded in config.yaml).
    carried = [k for k in UNUSED_BY_THE_ORIGINAL if k != "datasets.vla_data.lerobot_version"]
    assert sorted(listed) == sorted(carried) and len(listed) == 17
    assert not set(listed) & set(RECORDED_FOR_THE_ORIGINAL)
    assert "repeated_diffusion_steps" not in cfg.framework.action_model and "epochs" not in cfg.trainer
    assert cfg.trainer.enable_gradient_checkpointing is True  # read here: the blocks are recomputed in backward
    assert cfg.trainer.repeated_diffusion_steps == 4 and cfg.trainer.optimizer.weight_decay == 1e-8
    assert cfg.datasets.vla_data.image_size == 224 and cfg.datasets.vla_data.video_backend == "pyav"
    assert cfg.framework.cosmos25.attn_implementation == "flash_attention_2"
    assert cfg.trainer.learning_rate.base == 1e-5
    assert [m for m in messages if "video_backend" in m] == [
        "datasets.vla_data.video_backend=torchvision_av: is the original's decoder; frames are decoded with pyav"]


def test_the_originals_libero_launch_flags_parse(tmp_path):
    cfg, messages = _load_recording(_original_yaml(tmp_path), normalize_cli_overrides(ORIGINAL_LIBERO_FLAGS))
    fm = cfg.framework.cosmos25.flow_matching
    assert (fm.time_distribution, fm.high_sigma_ratio, fm.high_sigma_min) == ("uniform", None, None)
    assert (cfg.wandb_project, cfg.wandb_entity, cfg.run_id) == ("DiT4DiT_libero", "your_wandb_entity", "dit4dit_libero_all")
    assert cfg.output_dir == "playground/Checkpoints_libero/dit4dit_libero_all"
    assert cfg.trainer.freeze_modules == "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"
    assert (cfg.datasets.vla_data.per_device_batch_size, cfg.trainer.max_train_steps) == (4, 80000)
    # The misplaced key warns, names the right one, and (as in the original) changes nothing.
    assert "command line: 'trainer.framework.cosmos25.conditional_frame_timestep' is not a key (the original ignores " \
           "it, and so does this run); the key is 'framework.cosmos25.conditional_frame_timestep'" in messages
    assert cfg.framework.cosmos25.conditional_frame_timestep == 0.0001
    assert "framework" not in cfg.trainer


def test_an_unknown_key_next_to_the_originals_unread_ones_is_still_an_error(tmp_path):
    original = _original_yaml(tmp_path)
    with pytest.warns(OriginalKeysWarning), pytest.raises(ConfigError, match=r"unknown config key 'trainer\.epoch'\. Did you mean"):
        load_config(original, ["trainer.epoch=3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer\.framework\.cosmos25\.extract_layr'"):
        load_config(ROBOTWIN, ["trainer.framework.cosmos25.extract_layr=3"])


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
    cfg = load_config(ROBOTWIN, normalize_cli_overrides(["--trainer.max_train_steps", "7", "--trainer.save_interval=7",
                                                         "--framework.cosmos25.base_model=null"]))
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


def test_a_mapping_for_a_single_value_is_named():
    with pytest.raises(ConfigError, match=r"'trainer\.max_train_steps' takes a single value, not a mapping"):
        load_config(ROBOTWIN, ["trainer.max_train_steps.x=1"])


def test_learning_rate_groups_accept_user_named_modules():
    cfg = load_config(ROBOTWIN, ["trainer.learning_rate.my_adapter=3e-4"])
    assert cfg.trainer.learning_rate.my_adapter == 3e-4
    with pytest.raises(ConfigError, match=r"trainer\.learning_rate\.my_adapter: must be at least 0\.0, got -0\.1"):
        load_config(ROBOTWIN, ["trainer.learning_rate.my_adapter=-0.1"])


def test_missing_yaml_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("value", ["no", "false", "NO", "fp32"])
def test_mixed_precision_no_in_every_spelling(value):
    cfg = load_config(ROBOTWIN, [f"trainer.mixed_precision={value}"])
    assert cfg.trainer.mixed_precision == "no"


def test_image_size_as_int_or_square_pair():
    assert load_config(ROBOTWIN, ["datasets.vla_data.image_size=[96,96]"]).datasets.vla_data.image_size == 96
    with pytest.raises(ConfigError, match=r"image_size: \[96, 64\] is not square"):
        load_config(ROBOTWIN, ["datasets.vla_data.image_size=[96,64]"])


@pytest.mark.parametrize("backend", ["torchvision_av", "decord", "opencv", "pyav"])
def test_the_originals_video_backends_decode_with_pyav(backend):
    cfg, _ = _load_recording(ROBOTWIN, [f"datasets.vla_data.video_backend={backend}"])
    assert cfg.datasets.vla_data.video_backend == "pyav"


@pytest.mark.parametrize("loss", ["flow_matching", "pixel_l1", "pixel_mse", "latent_mse"])
def test_future_loss_types_of_the_original_are_valid_choices(loss):
    assert load_config(ROBOTWIN, [f"framework.cosmos25.future_loss_type={loss}"]).framework.cosmos25.future_loss_type == loss


def test_training_mode_is_normalised_once():
    assert load_config(ROBOTWIN, ["framework.cosmos25.training=Action"]).framework.cosmos25.training == "action"


def test_output_dir_is_derived_not_taken_and_the_config_is_read_only():
    cfg = load_config(ROBOTWIN, ["output_dir=/elsewhere", "run_root_dir=/runs", "run_id=r1"])
    assert cfg.output_dir == "/runs/r1"
    with pytest.raises(ReadonlyConfigError):
        cfg.trainer.max_train_steps = 5


def test_values_take_their_keys_type():
    cfg = load_config(ROBOTWIN, ["trainer.loss_scale.future_video=inf", "trainer.learning_rate.base=1e-4",
                                 "trainer.max_train_steps=10000.0", "run_id=123"])
    assert cfg.trainer.loss_scale.future_video == float("inf")
    assert cfg.trainer.learning_rate.base == 1e-4 and isinstance(cfg.trainer.max_train_steps, int)
    assert cfg.run_id == "123"


@pytest.mark.parametrize("override, message", [
    ("trainer.max_train_steps=ten", "trainer.max_train_steps: expected a number, got 'ten'"),
    ("trainer.max_train_steps=2.5", "trainer.max_train_steps: expected an integer"),
    ("trainer.is_resume=maybe", "trainer.is_resume: expected true or false"),
    ("seed=-1", "seed: must be at least 0, got -1"),
    ("datasets.vla_data.num_workers=-1", "datasets.vla_data.num_workers: must be at least 0, got -1"),
    ("trainer.learning_rate.base=nan", r"trainer.learning_rate.base: must be at least 0.0, got nan"),
    ("trainer.learning_rate.action_model=-1e-4", "trainer.learning_rate.action_model: must be at least 0.0"),
    ("trainer.num_warmup_steps=-5", "trainer.num_warmup_steps: must be at least 0, got -5"),
    ("trainer.max_train_steps=0", "trainer.max_train_steps: must be at least 1, got 0"),
    ("datasets.vla_data.per_device_batch_size=0", "per_device_batch_size: must be at least 1"),
    ("trainer.gradient_accumulation_steps=0", "gradient_accumulation_steps: must be at least 1"),
    ("trainer.optimizer.betas=[0.9]", r"trainer.optimizer.betas: expected 2 values, got 1"),
    ("trainer.mixed_precision=fp16", "trainer.mixed_precision: 'fp16' is not one of bf16, no"),
    ("trackers=[jsonl,tensorboard]", "trackers: 'tensorboard' is not one of jsonl, wandb"),
    ("framework.cosmos25.training=both", "framework.cosmos25.training: 'both' is not one of joint, action, video"),
    ("framework.cosmos25.future_loss_type=l2", "future_loss_type: 'l2' is not one of"),
    ("framework.cosmos25.flow_matching.time_distribution=beta", "time_distribution: 'beta' is not one of logit_normal, uniform"),
    ("framework.cosmos25.torch_dtype=float64", "torch_dtype: 'float64' is not one of bfloat16, float16, float32"),
    ("framework.cosmos25.attn_implementation=flex", "attn_implementation: 'flex' is not one of sdpa, eager, flash_attention_2"),
    ("framework.action_model.action_model_type=DiT-XL", "action_model_type: 'DiT-XL' is not one of DiT-B, DiT-L"),
    ("datasets.vla_data.video_backend=ffmpeg", "video_backend: 'ffmpeg' is not one of pyav, torchcodec"),
    ("datasets.vla_data.action_video_freq_ratio=0", "action_video_freq_ratio: must be at least 1"),
    ("datasets.vla_data.holdout_episodes=-1", "holdout_episodes: must be at least 0"),
    ("datasets.vla_data.video_delta_indices=[]", "video_delta_indices: give at least one frame offset"),
    ("trainer.keep_last_states=0", "keep_last_states: must be at least 1"),
    ("trainer.max_train_steps=null", r"trainer.max_train_steps: cannot be null; set a value \(the default is 100000\)"),
])
def test_each_key_is_checked_against_its_declaration(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROBOTWIN, [override])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["framework.action_model.action_dim=32"], "must equal datasets.vla_data.max_action_dim"),
        (["framework.action_model.state_dim=7"], "state_dim=7 must equal datasets.vla_data.max_state_dim=14"),
        (["framework.action_model.action_horizon=16"], r"action_horizon \(16\) must equal"),
        (["framework.action_model.diffusion_model_cfg.cross_attention_dim=64"],
         "cross_attention_dim=64 must equal framework.cosmos25.vl_hidden_dim=2048"),
        (["framework.action_model.hidden_size=64"], "output_dim=2560 must equal framework.action_model.hidden_size=64"),
        (["framework.action_model.max_seq_len=4"], r"max_seq_len=4 is shorter than the action chunk \(8\)"),
        (["framework.action_model.diffusion_model_cfg.num_attention_heads=2"], "set both or neither"),
        (["framework.action_model.diffusion_model_cfg.positional_embeddings=sinusoidal"], "only null is supported"),
        (["framework.cosmos25.flow_matching.high_sigma_min=null"], "high_sigma_min is null but high_sigma_ratio=0.05"),
        (["datasets.vla_data.image_size=200"], "image_size=200: Cosmos needs frame sides that are multiples of 16; use e.g. 192"),
        (["trainer.is_resume=true", "trainer.pretrained_checkpoint=/w.pt"], "both set"),
    ],
)
def test_cross_key_rules_are_checked_when_the_config_loads(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROBOTWIN, overrides)


def test_video_mode_needs_no_action_dims():
    cfg = load_config(ROBOTWIN, ["framework.cosmos25.training=video", "framework.action_model.action_dim=3"])
    assert cfg.framework.action_model.action_dim == 3


def _valid(tmp_path, *overrides):
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "data").mkdir(exist_ok=True)
    return load_config(ROBOTWIN, [f"framework.cosmos25.base_model={tmp_path / 'model'}",
                                  f"datasets.vla_data.data_root_dir={tmp_path / 'data'}", *overrides])


def _on_tiny(tiny_pipeline_dir):
    """RoboTwin's keys with the tiny pipeline as base model: its transformer is 4 blocks of width 32."""
    return [f"framework.cosmos25.base_model={tiny_pipeline_dir}", *TINY_BACKBONE]


def test_a_valid_training_launch_passes(tmp_path, tiny_pipeline_dir):
    assert validate_training_config(_valid(tmp_path, *_on_tiny(tiny_pipeline_dir))) == []


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer.is_resume=true", "trainer.move_old_run=true"], "move_old_run and trainer.is_resume are both set"),
        (["trainer.resume_weights_only=true"], "resume_weights_only only applies with --trainer.is_resume true"),
        (["framework.cosmos25.base_model=/no/such/model"], "huggingface-cli download nvidia/Cosmos-Predict2.5-2B"),
        (["framework.cosmos25.base_model=null"], "framework.cosmos25.base_model is not set"),
        (["datasets.vla_data.data_root_dir=/no/such/data"], r"data_root_dir: folder '/no/such/data' does not exist"),
        (["datasets.vla_data.data_root_dir=null"], "data_root_dir is not set"),
        (["trainer.pretrained_checkpoint=/no/w.pt"], "file '/no/w.pt' does not exist"),
    ],
)
def test_a_training_launchs_folders_and_files_must_exist(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_training_config(_valid(tmp_path, *overrides))


def test_a_warm_up_longer_than_the_run_is_a_warning_not_an_error(tmp_path, tiny_pipeline_dir):
    warnings_ = validate_training_config(_valid(tmp_path, "trainer.max_train_steps=100", "trainer.save_interval=100",
                                                *_on_tiny(tiny_pipeline_dir)))
    assert warnings_ == ["trainer.num_warmup_steps (5000) exceeds trainer.max_train_steps (100): "
                         "the learning rate never reaches its peak in this run"]


def test_train_py_takes_the_originals_launch_script_as_it_is(tmp_path):
    from DiT4DiT.training.train import parse_config

    with pytest.warns(OriginalKeysWarning):
        cfg = parse_config(["--config_yaml", str(_original_yaml(tmp_path)), *ORIGINAL_LIBERO_FLAGS])
    assert (cfg.framework.name, cfg.datasets.vla_data.data_mix, cfg.trainer.save_interval) == ("DiT4DiT", "libero_all", 40000)
    assert cfg.trainer.learning_rate.backbone_interface == 1e-5 and cfg.framework.cosmos25.extract_layer == 17


@pytest.mark.parametrize("override, message", [
    ("trainer.max_train_steps=ten", "trainer.max_train_steps: expected a number, got 'ten'"),
    ("trainer.max_train_steps=2.5", "trainer.max_train_steps: expected an integer"),
    ("trainer.is_resume=maybe", "trainer.is_resume: expected true or false"),
])
def test_values_of_the_wrong_type_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ROBOTWIN, [override])


def test_save_interval_longer_than_the_run_is_a_warning(tmp_path, tiny_pipeline_dir):
    warnings = validate_training_config(_valid(tmp_path, "trainer.save_interval=200", "trainer.max_train_steps=100",
                                               "trainer.num_warmup_steps=10", *_on_tiny(tiny_pipeline_dir)))
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
