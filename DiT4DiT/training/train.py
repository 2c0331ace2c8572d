"""DiT4DiT training entry point, the `accelerate launch` target.

    accelerate launch --config_file DiT4DiT/config/deepseeds/deepspeed_zero2.yaml --num_processes 8 \
        DiT4DiT/training/train.py --config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml --trainer.max_train_steps 1000

`main()` parses and validates the config, builds the Accelerator from the launch configuration, the data, the
model, the optimizer, and runs the loop: batch -> train_step -> maybe log / eval / save.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, DistributedType, broadcast_object_list, gather_object, set_seed
from omegaconf import DictConfig

from DiT4DiT.config.schema import ConfigError, load_config, normalize_cli_overrides
from DiT4DiT.config.validate import validate_training_config
from DiT4DiT.dataloader import DataError, build_vla_dataset, collate_fn, save_dataset_statistics
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules, module_paths
from DiT4DiT.model.modules.weights import CheckpointMismatchError, load_trained_weights
from DiT4DiT.training import checkpoint as ckpt
from DiT4DiT.training import preemption, resume as resumption, run_dir as run_dirs
from DiT4DiT.training.metrics import MetricsLogger, plot_loss_curve
from DiT4DiT.training.optim import build_lr_scheduler, build_param_groups
from DiT4DiT.training.sampler import ResumableBatchSampler, iterate_batches

log = logging.getLogger("dit4dit.train")


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, unusable resume state); the message says what to do."""


def parse_config(argv: list[str] | None) -> DictConfig:
    parser = argparse.ArgumentParser(
        description="Train DiT4DiT. Any further --a.b.c value / --a.b.c=value overrides a config key.",
    )
    parser.add_argument("--config_yaml", required=True, help="YAML config, e.g. DiT4DiT/config/tiny/dit4dit_tiny.yaml")
    args, overrides = parser.parse_known_args(argv)
    return load_config(args.config_yaml, normalize_cli_overrides(overrides))


def build_accelerator(cfg: DictConfig) -> Accelerator:
    """From the launch configuration (accelerate launch --config_file ...), plus what our config decides."""
    # Parameters may get no gradient in a step (the VAE decoder, the video transformer in action mode); DDP must
    # not wait for them. No buffer needs syncing (they are constants), and the text encoder's sit in host memory.
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True, broadcast_buffers=False)
    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.trainer.gradient_accumulation_steps, kwargs_handlers=[ddp]
    )
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        # No dataloader goes through accelerator.prepare (we shard batches ourselves for exact resume), so
        # DeepSpeed cannot infer these "auto" values; the clip norm comes from our config, not the JSON.
        ds_config = accelerator.state.deepspeed_plugin.deepspeed_config
        micro = int(cfg.datasets.vla_data.per_device_batch_size)
        ds_config["train_micro_batch_size_per_gpu"] = micro
        ds_config["gradient_accumulation_steps"] = int(cfg.trainer.gradient_accumulation_steps)
        ds_config["train_batch_size"] = micro * int(cfg.trainer.gradient_accumulation_steps) * accelerator.num_processes
        ds_config["gradient_clipping"] = float(cfg.trainer.gradient_clipping)
    return accelerator


def is_deepspeed(accelerator: Accelerator) -> bool:
    return accelerator.distributed_type == DistributedType.DEEPSPEED


def prefixes(module_paths: list[str]) -> tuple[str, ...]:
    return tuple(path + "." for path in module_paths)


def compose_loss(losses: dict[str, torch.Tensor], cfg: DictConfig) -> torch.Tensor:
    """total = action_loss + loss_scale.future_video * future_video_loss (either may be absent by mode)."""
    if not losses:
        raise TrainingError("the model returned no loss; check framework.cosmos25.training and the frame count")
    total = losses.get("action_loss", 0.0)
    if "future_video_loss" in losses:
        total = total + cfg.trainer.loss_scale.future_video * losses["future_video_loss"]
    return total


def train_step(model, optimizer, scheduler, accelerator, micro_batches, cfg, step, batch_position) -> dict[str, float]:
    """One optimizer step over `gradient_accumulation_steps` micro-batches; returns averaged metrics."""
    metrics: dict[str, float] = defaultdict(float)
    n_micro = len(micro_batches)
    for micro, batch in enumerate(micro_batches):
        with accelerator.accumulate(model):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.trainer.mixed_precision == "bf16"):
                losses = model(batch)
            total = compose_loss(losses, cfg)
            finite = accelerator.gather(torch.isfinite(total.detach()).reshape(1)).all()
            if not finite:
                epoch, index = batch_position(micro)
                values = {k: float(v) for k, v in losses.items()}
                raise TrainingError(
                    f"non-finite loss at optimizer step {step + 1}, micro-batch {micro} (epoch {epoch}, batch {index} "
                    f"of the epoch): {values} on at least one rank. The last good checkpoint is kept; lower the "
                    "learning rate or check the data, then continue with --trainer.is_resume true"
                )
            accelerator.backward(total)
            if accelerator.sync_gradients:
                if is_deepspeed(accelerator):
                    grad_norm = model.get_global_grad_norm()  # DeepSpeed clips inside backward
                else:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.trainer.gradient_clipping)
                metrics["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        for name, value in losses.items():
            metrics[name] += float(value) / n_micro
        metrics["total_loss"] += float(total) / n_micro
    return dict(metrics)


@torch.no_grad()
def eval_action_mse(model: torch.nn.Module, batch: list[dict]) -> float:
    """Masked MSE of predicted vs. true normalised action chunks on the fixed held-out batch, in eval mode."""
    was_training = model.training
    model.eval()
    predicted = model.predict_action(batch)["normalized_actions"]
    model.train(was_training)
    target = np.stack([example["action"] for example in batch])
    mask = np.stack([example["action_mask"] for example in batch])
    return float(((predicted - target) ** 2 * mask).sum() / mask.sum())


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    stats = {"host_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device.type != "cpu":
        stats["device_peak_mb"] = torch.get_device_module(device).max_memory_allocated(device) / 2**20
    return stats


def banner(cfg, accelerator, model, train_set, start_step, run_dir) -> None:
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    batch = cfg.datasets.vla_data.per_device_batch_size
    log.info(
        "run dir %s | %d process(es), %s | batch %d/process x %d processes x %d accumulation = %d samples/step | "
        "%d training samples | parameters: %.2fM trainable of %.2fM | mode %s | steps %d -> %d",
        run_dir, accelerator.num_processes, accelerator.distributed_type.value, batch, accelerator.num_processes,
        cfg.trainer.gradient_accumulation_steps, batch * accelerator.num_processes * cfg.trainer.gradient_accumulation_steps,
        len(train_set), trainable / 1e6, total / 1e6, cfg.framework.cosmos25.training, start_step, cfg.trainer.max_train_steps,
    )


def restore_training_state(state: Path, model, optimizer, scheduler, accelerator: Accelerator) -> None:
    """Optimizer, scheduler and this rank's RNG (the weights were loaded before accelerator.prepare)."""
    if is_deepspeed(accelerator):
        model.load_checkpoint(str(state), tag="deepspeed", load_module_strict=False)
    else:
        optimizer.load_state_dict(torch.load(state / "optimizer.pt", map_location="cpu", weights_only=True))
    scheduler.load_state_dict(torch.load(state / "scheduler.pt", weights_only=True))
    ckpt.load_rank_rng(state, accelerator.process_index, accelerator.device)


def due(done: int, interval: int, last: int) -> bool:
    return done % interval == 0 or done == last


def train(cfg: DictConfig, accelerator: Accelerator) -> Path:
    run_dir = Path(cfg.run_root_dir) / cfg.run_id
    cfg.output_dir = str(run_dir)
    checkpoints_dir = run_dir / "checkpoints"
    is_main, rank = accelerator.is_main_process, accelerator.process_index
    trainer_cfg, data_cfg = cfg.trainer, cfg.datasets.vla_data
    resume = resumption.find_resume(cfg, run_dir, rank, accelerator.num_processes)
    start_step = resume.step if resume else 0

    # Data and model: the same initial weights on every rank (per-rank randomness is seeded further down).
    set_seed(cfg.seed)
    train_set = build_vla_dataset(cfg, split="train")
    eval_set = build_vla_dataset(cfg, split="eval") if model_has_action_head(cfg) else None
    if resume:  # the run's statistics stay its statistics
        resumption.use_saved_statistics([d for d in (train_set, eval_set) if d is not None],
                                         run_dir / "dataset_statistics.json", is_main)
    elif is_main:
        save_dataset_statistics(train_set.statistics(), run_dir / "dataset_statistics.json")
        ckpt.save_config(cfg, run_dir / "config.yaml")
    model = build_framework(cfg)
    frozen = freeze_modules(model, trainer_cfg.freeze_modules)
    left_out_of_checkpoints = [] if trainer_cfg.save_full_state_dict else frozen
    if trainer_cfg.pretrained_checkpoint:
        load_pretrained(model, cfg, frozen)
    if resume and (resume.weights_only or not is_deepspeed(accelerator)):  # DeepSpeed restores its own state
        load_trained_weights(model, ckpt.load_weights(resume.weights), resume.weights, may_be_missing=prefixes(frozen))

    optimizer = torch.optim.AdamW(
        build_param_groups(model, trainer_cfg.learning_rate),
        lr=trainer_cfg.learning_rate.base,
        betas=tuple(trainer_cfg.optimizer.betas),
        eps=trainer_cfg.optimizer.eps,
        weight_decay=trainer_cfg.optimizer.weight_decay,
    )
    scheduler = build_lr_scheduler(optimizer, trainer_cfg)
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    if cfg.framework.cosmos25.prompt_cache:
        # Every instruction is encoded once, up front, on the device.
        instructions = set(train_set.instructions()) | set(eval_set.instructions() if eval_set else [])
        unwrapped.cache_prompts(sorted(instructions))
        text_encoder = unwrapped.backbone_interface.extractor.text_encoder
        if not any(p.requires_grad for p in text_encoder.parameters()):
            # Frozen and fully cached, it never runs again: its weights (~16 GB for the 2B snapshot's
            # 7B text encoder) go back to host memory, where a cache miss can still use it.
            text_encoder.to("cpu")
    if resume and not resume.weights_only:
        restore_training_state(resume.state, model, optimizer, scheduler, accelerator)
        log.info("resumed from %s at step %d", resume.state, start_step)
    else:
        resumption.fast_forward(scheduler, start_step)
        set_seed(cfg.seed + rank)

    accumulation, batch_size, last = trainer_cfg.gradient_accumulation_steps, data_cfg.per_device_batch_size, trainer_cfg.max_train_steps
    sampler = ResumableBatchSampler(len(train_set), batch_size, rank, accelerator.num_processes, cfg.seed)
    batches = iterate_batches(train_set, sampler, start_step * accumulation, data_cfg.num_workers, collate_fn)
    eval_batch = fixed_eval_batch(eval_set, batch_size, cfg.seed) if eval_set is not None and is_main else None
    logger = None
    if is_main:
        if resume:
            resumption.trim_metrics(run_dir, start_step)
        logger = MetricsLogger(cfg, run_dir, start_step)
        banner(cfg, accelerator, unwrapped, train_set, start_step, run_dir)

    with contextlib.ExitStack() as cleanup:
        if logger is not None:
            cleanup.callback(logger.close)
        stop = preemption.StopSignal().install()
        cleanup.callback(stop.uninstall)
        cleanup.callback(batches.close)  # DataLoader workers (they ignore SIGTERM) end now, not at interpreter exit
        for step in range(start_step, last):
            data_start = time.perf_counter()
            micro_batches = [next(batches) for _ in range(accumulation)]
            model_start = time.perf_counter()
            position = lambda micro, step=step: sampler.position(step * accumulation + micro)  # noqa: E731
            values = train_step(model, optimizer, scheduler, accelerator, micro_batches, cfg, step, position)
            done = step + 1
            if logger is not None:
                values["data_time"], values["model_time"] = model_start - data_start, time.perf_counter() - model_start
                logger.record(values, samples=batch_size * accumulation * accelerator.num_processes)
                logger.advance(done)
                if due(done, trainer_cfg.logging_frequency, last):
                    lrs = {f"learning_rate/{g['name']}": g["lr"] for g in optimizer.param_groups}
                    epoch = {"epoch": sampler.position(done * accumulation)[0]}
                    logger.flush(done, lrs | peak_memory_mb(accelerator.device) | epoch)
            if eval_batch is not None and due(done, trainer_cfg.eval_interval, last):
                logger.log({"step": done, "eval_action_mse": eval_action_mse(unwrapped, eval_batch)})
            stopping = stop.agreed() and done < last
            if due(done, trainer_cfg.save_interval, last) or stopping:
                save_training_checkpoint(
                    cfg, accelerator, model, optimizer, scheduler, checkpoints_dir, done, left_out_of_checkpoints
                )
            if stopping:
                raise preemption.Preempted(stop.signal_name, done, ckpt.state_dir(checkpoints_dir, done))

        checksums = replica_weight_checksums(accelerator, unwrapped)
        if is_main:
            logger.log({"step": last, "replica_weight_checksums": checksums})
            final = ckpt.weights_to_save(accelerator.get_state_dict(model), left_out_of_checkpoints)
            ckpt.save_weights(final, run_dir / "final_model" / "pytorch_model.pt")
    if is_main:
        plot_loss_curve(run_dir)
        log.info("done: %s", run_dir)
    accelerator.wait_for_everyone()
    return run_dir


def replica_weight_checksums(accelerator: Accelerator, model: torch.nn.Module) -> list[float]:
    """One checksum of the trainable weights per rank; replicas that drifted apart stop the run."""
    local = torch.stack([p.detach().double().sum() for p in model.parameters() if p.requires_grad]).sum()
    checksums = accelerator.gather(local.reshape(1).to(accelerator.device)).tolist()
    if len(set(checksums)) > 1:
        raise TrainingError(f"the ranks ended with different weights (checksums {checksums}); this is a bug, please report it")
    return checksums


def model_has_action_head(cfg: DictConfig) -> bool:
    return str(cfg.framework.cosmos25.training).lower() != "video"


def fixed_eval_batch(eval_set, batch_size: int, seed: int) -> list[dict]:
    """The same held-out samples at every eval, drawn from their own generator (the training RNG is untouched)."""
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(len(eval_set), generator=generator)[:batch_size].tolist()
    return collate_fn([eval_set[i] for i in indices])


def load_pretrained(model: torch.nn.Module, cfg: DictConfig, frozen: list[str]) -> None:
    """Warm start from `trainer.pretrained_checkpoint`: all its weights, or only `trainer.reload_modules`."""
    path = Path(cfg.trainer.pretrained_checkpoint)
    state = ckpt.load_weights(path)
    modules = module_paths(cfg.trainer.reload_modules)
    if modules:
        listed = prefixes(modules)
        state = {k: v for k, v in state.items() if k.startswith(listed)}
        if not state:
            raise ConfigError(f"trainer.reload_modules: {path} holds no weights under {modules}")
        # The listed modules must load completely; everything else keeps its freshly built weights.
        others = tuple(k for k in model.state_dict() if not k.startswith(listed))
        load_trained_weights(model, state, path, may_be_missing=others)
    else:
        load_trained_weights(model, state, path, may_be_missing=prefixes(frozen))
    log.info("loaded %d tensors from %s", len(state), path)


def save_training_checkpoint(cfg, accelerator, model, optimizer, scheduler, checkpoints_dir: Path, step: int,
                             left_out: list[str]) -> None:
    """Weights (main process) and the full training state (every rank), each published atomically."""
    is_main = accelerator.is_main_process
    staging = ckpt.staging_dir(checkpoints_dir, step)
    weights_name = ckpt.weights_path(checkpoints_dir, step).name
    if is_main:
        state_dict = accelerator.get_state_dict(model)
        kept = ckpt.weights_to_save(state_dict, left_out)
        ckpt.save_weights(kept, checkpoints_dir / weights_name)
        ckpt.append_summary(Path(cfg.output_dir), step)
        ckpt.save_config(cfg, Path(cfg.output_dir) / "config.yaml")
        ckpt.discard_partial(staging)
    accelerator.wait_for_everyone()
    if is_deepspeed(accelerator):
        ckpt.space_checked(staging, lambda: model.save_checkpoint(str(staging), tag="deepspeed", exclude_frozen_parameters=True))
        ckpt.save_rank_state(staging, accelerator.process_index, accelerator.device, scheduler=scheduler if is_main else None)
    else:
        ckpt.save_rank_state(
            staging, accelerator.process_index, accelerator.device,
            optimizer=optimizer if is_main else None, scheduler=scheduler if is_main else None,
        )
    accelerator.wait_for_everyone()
    # Every rank hashes a share of the files (the list comes from the main process, so all hash the same list).
    names = broadcast_object_list([ckpt.manifest_names(staging, checkpoints_dir / weights_name) if is_main else None])[0]
    shares = gather_object([ckpt.manifest_share(staging, names, accelerator.process_index, accelerator.num_processes)])
    if is_main:
        trainer_state = {"step": step, "weights": weights_name, "num_processes": accelerator.num_processes,
                         ckpt.MANIFEST: {name: digest for share in shares for name, digest in share.items()}}
        ckpt.publish_state(checkpoints_dir, step, trainer_state, keep_last=cfg.trainer.keep_last_states)
    accelerator.wait_for_everyone()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenizers forks badly with DataLoader workers
    try:
        cfg = parse_config(argv)
        for warning in validate_training_config(cfg):
            log.warning(warning)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    accelerator = build_accelerator(cfg)
    prefix = f"[rank {accelerator.process_index}] " if accelerator.num_processes > 1 else ""
    try:
        with run_dirs.claimed(accelerator, cfg):
            train(cfg, accelerator)
    except (run_dirs.RunDirError, resumption.ResumeError, preemption.Preempted) as stopped:
        print(f"{prefix}{type(stopped).__name__}: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except (ConfigError, DataError, TrainingError, CheckpointMismatchError, FileNotFoundError, ckpt.DiskFullError) as error:
        print(f"{prefix}{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
