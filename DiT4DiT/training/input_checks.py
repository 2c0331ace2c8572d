"""What a training launch reads, checked after the config loads and before any process, dataset or model exists:
the data configs and folders, the closed-loop evaluation's settings, the pretrained checkpoint, and the base
model's folder; ConfigError for the first that cannot work.
"""

from __future__ import annotations

from pathlib import Path

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.config.validate import action_chunk, check_backbone_fits
from DiT4DiT.dataloader.config_checks import check_data_configs, check_data_folders, check_latent_cache
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems
from DiT4DiT.training.closed_loop_eval import check_config as check_closed_loop_eval


def validate_training_config(cfg: ConfigSections) -> list[str]:
    """The folders and files a training launch reads exist and the base model's folder is complete (ConfigError
    otherwise); warnings for odd but legal values."""
    data, trainer = cfg.datasets.vla_data, cfg.trainer
    check_data_configs(data, action_chunk(cfg))
    if cfg.framework.cosmos25.latent_cache:
        check_latent_cache(data)
    check_data_folders(data)
    if trainer.pretrained_checkpoint and not Path(trainer.pretrained_checkpoint).is_file():
        raise ConfigError(f"trainer.pretrained_checkpoint: file '{trainer.pretrained_checkpoint}' does not exist")
    check_closed_loop_eval(trainer)
    problems = pipeline_folder_problems(cfg.framework.cosmos25.base_model)  # last: it reads a header per weight file
    if problems:
        raise ConfigError(" | ".join(problems))
    check_backbone_fits(cfg)
    warnings = []
    if trainer.save_interval > trainer.max_train_steps:
        warnings.append(f"trainer.save_interval ({trainer.save_interval}) is larger than the run (trainer.max_train_steps="
                        f"{trainer.max_train_steps}): only the final checkpoint (step {trainer.max_train_steps}) is written")
    if trainer.num_warmup_steps > trainer.max_train_steps:
        warnings.append(f"trainer.num_warmup_steps ({trainer.num_warmup_steps}) exceeds trainer.max_train_steps "
                        f"({trainer.max_train_steps}): the learning rate never reaches its peak in this run")
    return warnings
