"""Cross-key checks of a resolved config, run once before any process group or model exists."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from DiT4DiT.config.schema import ConfigError

TRAINING_MODES = ("joint", "action", "video")
TRACKERS = ("jsonl", "wandb")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def check_action_dims(cfg: DictConfig) -> None:
    """The action head is built at the padded widths: the data loader pads to max_*_dim before the model."""
    head, data = cfg.framework.action_model, cfg.datasets.vla_data
    _require(int(head.action_dim) == int(data.max_action_dim),
             f"framework.action_model.action_dim={head.action_dim} must equal "
             f"datasets.vla_data.max_action_dim={data.max_action_dim} (actions are padded to that width)")
    _require(not head.state_dim or int(head.state_dim) == int(data.max_state_dim),
             f"framework.action_model.state_dim={head.state_dim} must equal "
             f"datasets.vla_data.max_state_dim={data.max_state_dim} (or 0 for no state)")


def validate_training_config(cfg: DictConfig) -> list[str]:
    """Raise ConfigError with what to set for the first problem found; return warnings for odd but legal values."""
    cosmos, head, data, trainer = cfg.framework.cosmos25, cfg.framework.action_model, cfg.datasets.vla_data, cfg.trainer

    _require(cosmos.base_model is not None, "framework.cosmos25.base_model is not set: pass --framework.cosmos25.base_model DIR "
             "(a local Cosmos-Predict2.5 diffusers folder)")
    _require(Path(cosmos.base_model).is_dir(), f"framework.cosmos25.base_model: folder '{cosmos.base_model}' does not exist. "
             "Download it with: huggingface-cli download nvidia/Cosmos-Predict2.5-2B --revision diffusers/base/post-trained "
             f"--local-dir {cosmos.base_model}  (or generate the tiny one: python -m DiT4DiT.tools.tiny_cosmos --out {cosmos.base_model})")
    _require(data.data_root_dir is not None, "datasets.vla_data.data_root_dir is not set: pass --datasets.vla_data.data_root_dir DIR")
    _require(Path(data.data_root_dir).is_dir(), f"datasets.vla_data.data_root_dir: folder '{data.data_root_dir}' does not exist")

    mode = str(cosmos.training).lower()
    _require(mode in TRAINING_MODES, f"framework.cosmos25.training: '{cosmos.training}' is not one of {list(TRAINING_MODES)}")
    _require(set(cfg.trackers) <= set(TRACKERS), f"trackers: {list(cfg.trackers)} has an unknown tracker; valid: {list(TRACKERS)}")
    _require(trainer.mixed_precision in ("bf16", "no"), f"trainer.mixed_precision: '{trainer.mixed_precision}' must be bf16 or no")

    for key in ("max_train_steps", "save_interval", "eval_interval", "logging_frequency", "gradient_accumulation_steps",
                "repeated_diffusion_steps", "keep_last_states"):
        _require(int(trainer[key]) >= 1, f"trainer.{key}: must be a positive integer, got {trainer[key]}")
    _require(int(data.per_device_batch_size) >= 1,
             f"datasets.vla_data.per_device_batch_size: must be a positive integer, got {data.per_device_batch_size}")
    warnings = []
    if trainer.save_interval > trainer.max_train_steps:
        warnings.append(f"trainer.save_interval ({trainer.save_interval}) is larger than the run (trainer.max_train_steps="
                        f"{trainer.max_train_steps}): only the final checkpoint (step {trainer.max_train_steps}) is written")
    if trainer.num_warmup_steps > trainer.max_train_steps:
        warnings.append(f"trainer.num_warmup_steps ({trainer.num_warmup_steps}) exceeds trainer.max_train_steps "
                        f"({trainer.max_train_steps}): the learning rate never reaches its peak in this run")

    if mode != "video":
        check_action_dims(cfg)
        _require(head.action_horizon == head.future_action_window_size + 1,
                 f"framework.action_model.action_horizon ({head.action_horizon}) must equal "
                 f"future_action_window_size + 1 ({head.future_action_window_size + 1}): the eval compares "
                 "predicted chunks with data chunks of that length")
    _require(head.past_action_window_size == 0, "framework.action_model.past_action_window_size: only 0 is supported")
    if trainer.is_resume and trainer.pretrained_checkpoint:
        raise ConfigError("trainer.is_resume and trainer.pretrained_checkpoint are both set: resume continues this run's "
                          "own training state; unset one of them")
    _require(trainer.is_resume or not trainer.resume_weights_only,
             "trainer.resume_weights_only only applies with --trainer.is_resume true")
    _require(not (trainer.is_resume and trainer.move_old_run),
             "trainer.move_old_run and trainer.is_resume are both set: resume continues the run in the run dir, "
             "move_old_run starts a new one there; unset one of them")
    if trainer.pretrained_checkpoint:
        _require(Path(trainer.pretrained_checkpoint).is_file(),
                 f"trainer.pretrained_checkpoint: file '{trainer.pretrained_checkpoint}' does not exist")
    return warnings
