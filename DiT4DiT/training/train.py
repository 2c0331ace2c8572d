"""DiT4DiT training entry point, the `accelerate launch` target.

    accelerate launch --config_file DiT4DiT/config/deepseeds/deepspeed_zero2.yaml --num_processes 8 \
        DiT4DiT/training/train.py --config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml --trainer.max_train_steps 1000

`main()`: parse_config (every key typed and every rule checked, DiT4DiT/config) -> validate_training_config (the
folders exist) -> build_accelerator -> run_training(): the Trainer (trainer.py: resume, data, model), build_optimizer,
trainer.prepare (schedule, prompts, saved state), then the loop: batch -> train_step below (forward, backward, clip,
optimizer.step) -> trainer.after_step (log / eval / save). The Trainer never calls back into this file.
This file holds the device-specific code the NPU patch edits: the imports, the optimizer and the autocast site.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Callable

if not __package__:  # run as a script (accelerate launch, python): a missing package is one line, not a traceback
    sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the checkout holding this file provides DiT4DiT
    from DiT4DiT.requirements_check import TRAINING, require
    require("DiT4DiT/training/train.py", TRAINING)

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

from DiT4DiT.config.schema import load_config, normalize_cli_overrides
from DiT4DiT.config.sections import ConfigSections, TrainerLossScaleSection, TrainerSection
from DiT4DiT.errors import DiT4DiTError, TrainingError, run_main
from DiT4DiT.model.framework.DiT4DiT import autocast_enabled
from DiT4DiT.training import run_dir as run_dirs
from DiT4DiT.training.input_checks import validate_training_config
from DiT4DiT.training.optim import build_param_groups
from DiT4DiT.training.profiler import step_profiler
from DiT4DiT.training.process_group import destroy_process_group
from DiT4DiT.training.rank_logging import configure_logging
from DiT4DiT.training.sampler import ResumableBatchOrder
from DiT4DiT.training.shared_run_dir import check_shared_run_dir
from DiT4DiT.training.trainer import Trainer, build_accelerator

log = logging.getLogger("dit4dit.train")


def parse_config(argv: list[str] | None) -> ConfigSections:
    parser = argparse.ArgumentParser(
        description="Train DiT4DiT. Any further --a.b.c value / --a.b.c=value overrides a config key.",
    )
    parser.add_argument("--config_yaml", required=True, help="YAML config, e.g. DiT4DiT/config/tiny/dit4dit_tiny.yaml")
    args, overrides = parser.parse_known_args(argv)
    return load_config(args.config_yaml, normalize_cli_overrides(overrides))


def build_optimizer(model: torch.nn.Module, trainer_cfg: TrainerSection) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        build_param_groups(model, trainer_cfg.learning_rate),
        lr=trainer_cfg.learning_rate["base"],
        betas=tuple(trainer_cfg.optimizer.betas),
        eps=trainer_cfg.optimizer.eps,
        weight_decay=trainer_cfg.optimizer.weight_decay,
    )


def compose_loss(losses: dict[str, torch.Tensor], loss_scale: TrainerLossScaleSection) -> torch.Tensor:
    """total = action_loss + loss_scale.future_video * future_video_loss (either may be absent by mode; the model
    refuses to return neither)."""
    total = losses.get("action_loss", 0.0)
    if "future_video_loss" in losses:
        total = total + loss_scale.scaled_video(losses["future_video_loss"])
    return total


class NonFiniteGuard:
    """A bad micro-batch never reaches the weights, at one host wait per optimizer step: each micro-batch's finite
    flag stays on the device; before the backward of the step's last micro-batch (the one that updates the
    weights: DeepSpeed steps inside that backward) all ranks' flags are gathered and read once."""

    def __init__(self):
        self.flags: list[torch.Tensor] = []
        self.losses: list[dict[str, torch.Tensor]] = []

    def watch(self, losses: dict[str, torch.Tensor], total: torch.Tensor) -> None:
        """Record one micro-batch (no host read)."""
        self.flags.append(torch.isfinite(total.detach()).reshape(()))
        self.losses.append({name: value.detach() for name, value in losses.items()})

    def first_non_finite(self, gather: Callable[[torch.Tensor], torch.Tensor]) -> tuple[int, dict[str, float]] | None:
        """Collective over ranks: None when every micro-batch so far was finite on every rank, else the first bad
        micro-batch's index and this rank's loss values for it. Clears the recorded micro-batches."""
        flags = gather(torch.stack(self.flags).reshape(1, -1)).reshape(-1, len(self.flags)).all(dim=0).cpu()
        losses, self.flags, self.losses = self.losses, [], []
        if bool(flags.all()):
            return None
        micro = int((~flags).nonzero()[0])
        return micro, {name: float(value) for name, value in losses[micro].items()}


def grad_norm_scalar(value, device: torch.device) -> torch.Tensor:
    """The grad norm as a device scalar, without a host read (DeepSpeed may give a float, or None before a step)."""
    if torch.is_tensor(value):
        return value.detach()
    return torch.tensor(float("nan") if value is None else float(value), device=device)


def train_step(micro_batches: list[list[dict]], step: int, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scheduler, accelerator: Accelerator, settings: TrainerSection,
               batch_order: ResumableBatchOrder) -> dict[str, torch.Tensor]:
    """One optimizer step over `gradient_accumulation_steps` micro-batches; returns averaged metrics (on the device).

    `model` and `optimizer` are as accelerate prepared them (a DDP module or a DeepSpeed engine)."""
    metrics: dict[str, torch.Tensor] = {}
    n_micro = len(micro_batches)
    guard = NonFiniteGuard()
    for micro, batch in enumerate(micro_batches):
        with accelerator.accumulate(model):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast_enabled(settings.mixed_precision)):
                losses = model(batch)
            total = compose_loss(losses, settings.loss_scale)
            guard.watch(losses, total)
            # One host wait per optimizer step, before the backward that updates the weights.
            non_finite = guard.first_non_finite(accelerator.gather) if accelerator.sync_gradients else None
            if non_finite is not None:
                bad_micro, values = non_finite
                epoch, index = batch_order.position(step * n_micro + bad_micro)
                raise TrainingError(
                    f"non-finite loss at optimizer step {step + 1}, micro-batch {bad_micro} (epoch {epoch}, batch {index} "
                    f"of the epoch): {values} on at least one rank. The last good checkpoint is kept; lower the "
                    "learning rate or check the data, then continue with --trainer.is_resume true"
                )
            accelerator.backward(total)
            if accelerator.sync_gradients:
                if accelerator.distributed_type == DistributedType.DEEPSPEED:
                    grad_norm = model.get_global_grad_norm()  # DeepSpeed clips inside backward
                else:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), settings.gradient_clipping)
                metrics["grad_norm"] = grad_norm_scalar(grad_norm, accelerator.device)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        for name, value in [*losses.items(), ("total_loss", total)]:  # summed on the device
            metrics[name] = metrics.get(name, 0) + value.detach() / n_micro
    return metrics


def run_training(cfg: ConfigSections, accelerator: Accelerator) -> None:
    """The run, top to bottom: set-up, then batch -> train_step -> bookkeeping, until max_train_steps."""
    trainer = Trainer(cfg, accelerator)  # resume, data, model
    trainer.prepare(build_optimizer(trainer.model, trainer.settings))  # schedule, prompts, saved state
    # trainer.profile_steps: torch.profiler here; the NPU patch hands in torch_npu.profiler (its own trace format)
    profiling = step_profiler(torch.profiler, trainer.settings.profile_steps, trainer.start_step, trainer.run_dir,
                              accelerator.process_index, accelerator.is_main_process, accelerator.device.type)
    with trainer.running(), profiling as profiler:  # cleanup on every exit; the final model when the loop ends
        for step, micro_batches in trainer.steps():
            metrics = train_step(micro_batches, step, model=trainer.model, optimizer=trainer.optimizer,
                                 scheduler=trainer.scheduler, accelerator=accelerator, settings=trainer.settings,
                                 batch_order=trainer.batch_order)
            trainer.after_step(step, metrics)  # log, evaluate, save; raises Preempted on an agreed stop
            profiler.step(step + 1)


def main(argv: list[str] | None = None) -> int:
    configure_logging()  # each message once in train.log, rank-tagged where rank-specific
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizers forks badly with DataLoader workers
    accelerator = None

    def train() -> None:
        nonlocal accelerator
        cfg = parse_config(argv)
        for warning in validate_training_config(cfg):
            log.warning(warning)
        accelerator = build_accelerator(cfg)
        check_shared_run_dir(accelerator, cfg.run_root_dir)  # every node must see the run dir
        with run_dirs.claimed(accelerator, cfg.run_dir, cfg.trainer.is_resume, cfg.trainer.move_old_run):
            run_training(cfg, accelerator)

    def said_by(error: DiT4DiTError) -> str | None:  # one line, once: by the main process when all ranks raised it
        many = accelerator is not None and accelerator.num_processes > 1
        if many and error.same_on_every_rank and not accelerator.is_main_process:
            return None
        return (f"[rank {accelerator.process_index}] " if many and not error.same_on_every_rank else "") + error.label

    status = None
    try:
        status = run_main(train, said_by)
        return status
    finally:
        destroy_process_group(everyone_here=status == 0)


if __name__ == "__main__":
    sys.exit(main())
