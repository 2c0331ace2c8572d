"""DiT4DiT training entry point, the `accelerate launch` target.

    accelerate launch --config_file DiT4DiT/config/deepseeds/deepspeed_zero2.yaml --num_processes 8 \
        DiT4DiT/training/train.py --config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml --trainer.max_train_steps 1000

`main()`: parse_config (every key typed and every rule checked, DiT4DiT/config) -> validate_training_config (the
folders exist) -> build_accelerator -> train(): set_up() builds the data, model, optimizer and schedule into a
`Run`, then the loop: batch -> train_step (forward, backward, clip, optimizer.step) -> maybe log / eval / save.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import resource
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedDataParallelKwargs, DistributedType, broadcast_object_list, gather_object, set_seed
from omegaconf import DictConfig

from DiT4DiT.config.schema import ConfigError, load_config, normalize_cli_overrides
from DiT4DiT.config.validate import has_action_head, validate_training_config
from DiT4DiT.dataloader import DataError, build_vla_datasets, collate_fn, save_dataset_statistics
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.framework.DiT4DiT import autocast_enabled
from DiT4DiT.model.freezing import freeze_modules, left_out_of_checkpoints, module_paths
from DiT4DiT.model.modules.cosmos_backbone import unused_parameters_expected
from DiT4DiT.model.modules.weights import CheckpointMismatchError, load_trained_weights
from DiT4DiT.training import checkpoint as ckpt
from DiT4DiT.training import heartbeat, preemption, resources, resume as resumption, run_dir as run_dirs
from DiT4DiT.training.finite_guard import NonFiniteGuard
from DiT4DiT.training.metrics import DeviceWindow, MetricsFileError, MetricsLogger, as_device_scalar, plot_loss_curve, trim_metrics
from DiT4DiT.training.optim import build_lr_scheduler, build_param_groups
from DiT4DiT.training.rank_logging import configure_logging
from DiT4DiT.training.shared_run_dir import check_shared_run_dir
from DiT4DiT.training.sampler import ResumableBatchOrder, iterate_batches

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
    # DDP looks for parameters without gradient (a graph traversal per step) only when the mode leaves some.
    # No buffer needs syncing (they are constants), and the released text encoder's are empty.
    ddp = DistributedDataParallelKwargs(find_unused_parameters=unused_parameters_expected(cfg), broadcast_buffers=False)
    # The process group is made here, with our timeout: InitProcessGroupKwargs would drop a value equal to its own
    # default (600 s, assumed for NCCL), leaving gloo and HCCL at torch's 30 minutes. DeepSpeed's init gets it too.
    PartialState(timeout=collective_timeout(cfg))
    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.trainer.gradient_accumulation_steps, kwargs_handlers=[ddp]
    )
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        # No dataloader goes through accelerator.prepare (we shard batches ourselves for exact resume), so
        # DeepSpeed cannot infer these "auto" values; the clip norm comes from our config, not the JSON.
        ds_config = accelerator.state.deepspeed_plugin.deepspeed_config
        micro, accumulation = cfg.datasets.vla_data.per_device_batch_size, cfg.trainer.gradient_accumulation_steps
        ds_config["train_micro_batch_size_per_gpu"] = micro
        ds_config["gradient_accumulation_steps"] = accumulation
        ds_config["train_batch_size"] = micro * accumulation * accelerator.num_processes
        ds_config["gradient_clipping"] = cfg.trainer.gradient_clipping
    return accelerator


def collective_timeout(cfg: DictConfig) -> timedelta:
    return timedelta(seconds=cfg.trainer.collective_timeout_s)


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


@dataclass
class Run:
    """What set-up hands to the loop: the prepared model, optimizer and schedule, the data, where to write."""

    cfg: DictConfig
    accelerator: Accelerator
    model: torch.nn.Module  # as prepared by accelerate (DDP module or DeepSpeed engine)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    batch_order: ResumableBatchOrder
    start_step: int = 0
    left_out: list[str] = field(default_factory=list)  # module paths the checkpoints leave out
    batches: Iterator[list[dict]] | None = None
    eval_batch: list[dict] | None = None
    logger: MetricsLogger | None = None
    window: DeviceWindow = field(default_factory=DeviceWindow)  # every rank sums its values on the device

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.output_dir)

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def unwrapped(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)


def train_step(run: Run, micro_batches: list[list[dict]], step: int) -> dict[str, torch.Tensor]:
    """One optimizer step over `gradient_accumulation_steps` micro-batches; returns averaged metrics (on the device)."""
    model, accelerator, cfg = run.model, run.accelerator, run.cfg
    metrics: dict[str, torch.Tensor] = {}
    n_micro = len(micro_batches)
    guard = NonFiniteGuard()
    for micro, batch in enumerate(micro_batches):
        with accelerator.accumulate(model):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast_enabled(cfg)):
                losses = model(batch)
            total = compose_loss(losses, cfg)
            guard.watch(losses, total)
            # One host wait per optimizer step, before the backward that updates the weights.
            non_finite = guard.first_non_finite(accelerator.gather) if accelerator.sync_gradients else None
            if non_finite is not None:
                bad_micro, values = non_finite
                epoch, index = run.batch_order.position(step * n_micro + bad_micro)
                raise TrainingError(
                    f"non-finite loss at optimizer step {step + 1}, micro-batch {bad_micro} (epoch {epoch}, batch {index} "
                    f"of the epoch): {values} on at least one rank. The last good checkpoint is kept; lower the "
                    "learning rate or check the data, then continue with --trainer.is_resume true"
                )
            accelerator.backward(total)
            if accelerator.sync_gradients:
                if is_deepspeed(accelerator):
                    grad_norm = model.get_global_grad_norm()  # DeepSpeed clips inside backward
                else:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.trainer.gradient_clipping)
                metrics["grad_norm"] = as_device_scalar(grad_norm, accelerator.device)
                run.optimizer.step()
                run.scheduler.step()
                run.optimizer.zero_grad(set_to_none=True)
        for name, value in [*losses.items(), ("total_loss", total)]:  # summed on the device
            metrics[name] = metrics.get(name, 0) + value.detach() / n_micro
    return metrics


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
    """Host peak RSS of the run so far; device peak of the logging window (reset here)."""
    stats = {"host_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device.type != "cpu":
        stats["device_peak_mb"] = torch.get_device_module(device).max_memory_allocated(device) / 2**20
        torch.get_device_module(device).reset_peak_memory_stats(device)
    return stats


def banner(run: Run, train_set) -> None:
    cfg, accelerator = run.cfg, run.accelerator
    params = list(run.unwrapped.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    batch, accumulation = cfg.datasets.vla_data.per_device_batch_size, cfg.trainer.gradient_accumulation_steps
    log.info(
        "run dir %s | %d process(es), %s | batch %d/process x %d processes x %d accumulation = %d samples/step | "
        "%d training samples | parameters: %.2fM trainable of %.2fM | mode %s | steps %d -> %d",
        run.run_dir, accelerator.num_processes, accelerator.distributed_type.value, batch, accelerator.num_processes,
        accumulation, batch * accelerator.num_processes * accumulation, len(train_set), trainable / 1e6, total / 1e6,
        cfg.framework.cosmos25.training, run.start_step, cfg.trainer.max_train_steps,
    )


def restore_training_state(run: Run, state: Path) -> None:
    """Optimizer, scheduler and this rank's RNG (the weights were loaded before accelerator.prepare)."""
    accelerator = run.accelerator
    if is_deepspeed(accelerator):
        run.model.load_checkpoint(str(state), tag="deepspeed", load_module_strict=False)
    else:
        run.optimizer.load_state_dict(torch.load(state / "optimizer.pt", map_location="cpu", weights_only=True))
    run.scheduler.load_state_dict(torch.load(state / "scheduler.pt", weights_only=True))
    try:
        ckpt.load_rank_rng(state, accelerator.process_index, accelerator.device)
    except FileNotFoundError as error:  # raised on purpose: this rank has no RNG state in a smaller run's state
        raise TrainingError(str(error)) from None


def due(done: int, interval: int, last: int) -> bool:
    return done % interval == 0 or done == last


def build_model(cfg: DictConfig, resume: resumption.Resume | None, deepspeed: bool) -> tuple[torch.nn.Module, list[str]]:
    """The framework with its frozen modules, warm-started or resumed; also the module paths checkpoints leave out."""
    model = build_framework(cfg)
    frozen = freeze_modules(model, cfg.trainer.freeze_modules)
    if cfg.trainer.pretrained_checkpoint:
        load_pretrained(model, cfg, frozen)
    if resume and (resume.weights_only or not deepspeed):  # DeepSpeed restores its own state
        load_trained_weights(model, ckpt.load_weights(resume.weights), resume.weights, may_be_missing=prefixes(frozen))
    return model, left_out_of_checkpoints(cfg)


def build_optimizer(model: torch.nn.Module, trainer_cfg: DictConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        build_param_groups(model, trainer_cfg.learning_rate),
        lr=trainer_cfg.learning_rate.base,
        betas=tuple(trainer_cfg.optimizer.betas),
        eps=trainer_cfg.optimizer.eps,
        weight_decay=trainer_cfg.optimizer.weight_decay,
    )


def set_up(cfg: DictConfig, accelerator: Accelerator) -> Run:
    """Data, model, optimizer and schedule, restored from the latest training state when resuming."""
    run_dir, is_main = Path(cfg.output_dir), accelerator.is_main_process
    resume = resumption.find_resume(cfg, run_dir, accelerator.process_index, accelerator.num_processes)
    # Data and model: the same initial weights on every rank (per-rank randomness is seeded further down).
    set_seed(cfg.seed)
    # Both splits from one pass; one process per node indexes while the others wait, then read its cache.
    with accelerator.local_main_process_first():
        datasets = build_vla_datasets(cfg, ("train", "eval") if has_action_head(cfg) else ("train",))
    train_set, eval_set = datasets["train"], datasets.get("eval")
    batch_size = cfg.datasets.vla_data.per_device_batch_size
    batch_order = ResumableBatchOrder(len(train_set), batch_size, accelerator.process_index, accelerator.num_processes, cfg.seed)
    for warning in resources.check_resources(cfg, accelerator.num_processes, accelerator.device):
        log.warning(warning)
    if resume:  # the run's statistics stay its statistics
        resumption.use_saved_statistics([d for d in (train_set, eval_set) if d is not None],
                                         run_dir / "dataset_statistics.json", is_main)
    elif is_main:
        save_dataset_statistics(train_set.statistics(), run_dir / "dataset_statistics.json")
        ckpt.save_config(cfg, run_dir / "config.yaml")
    model, left_out = build_model(cfg, resume, is_deepspeed(accelerator))
    optimizer = build_optimizer(model, cfg.trainer)
    scheduler = build_lr_scheduler(optimizer, cfg.trainer)
    model, optimizer = accelerator.prepare(model, optimizer)
    run = Run(cfg, accelerator, model, optimizer, scheduler, batch_order, resume.step if resume else 0, left_out)
    # The model stores every instruction's embedding (encoded once, split across ranks) and releases the text encoder.
    run.unwrapped.prepare_prompts([*train_set.instructions(), *(eval_set.instructions() if eval_set else [])], accelerator)
    if resume and not resume.weights_only:
        restore_training_state(run, resume.state)
        log.info("resumed from %s at step %d", resume.state, run.start_step)
    else:
        resumption.fast_forward(scheduler, run.start_step)
        set_seed(cfg.seed + accelerator.process_index)
    start_micro_step = run.start_step * cfg.trainer.gradient_accumulation_steps
    run.batches = iterate_batches(train_set, batch_order, start_micro_step, cfg.datasets.vla_data.num_workers, collate_fn)
    if is_main:
        run.eval_batch = fixed_eval_batch(eval_set, batch_size, cfg.seed) if eval_set is not None else None
        if resume:
            trim_metrics(run_dir, run.start_step)
        run.logger = MetricsLogger(cfg, run_dir, run.start_step)
        banner(run, train_set)
    return run


def train(cfg: DictConfig, accelerator: Accelerator) -> Path:
    run = set_up(cfg, accelerator)
    trainer, last = cfg.trainer, cfg.trainer.max_train_steps
    with contextlib.ExitStack() as cleanup:
        if run.logger is not None:
            cleanup.callback(run.logger.close)
        stop = preemption.StopSignal().install(collective_timeout(cfg))
        cleanup.callback(stop.uninstall)
        beat = heartbeat.start_heartbeat(trainer.stall_timeout_s, collective_timeout(cfg))
        cleanup.callback(beat.stop)
        # Shut the DataLoader workers down now: they ignore SIGTERM (so a preempted step can finish), so the
        # interpreter's exit could not stop them if the iterator were still alive then.
        cleanup.callback(run.batches.close)
        loop_start = time.perf_counter()
        for step in range(run.start_step, last):
            data_start = time.perf_counter()
            micro_batches = [next(run.batches) for _ in range(trainer.gradient_accumulation_steps)]
            model_start = time.perf_counter()
            values = train_step(run, micro_batches, step)
            done = step + 1
            beat.step = done
            timings = {"data_time": model_start - data_start, "model_time": time.perf_counter() - model_start}
            log_step(run, values, timings, done)
            if done == run.start_step + 1:
                log.info(resources.time_to_finish(done, run.start_step, last, time.perf_counter() - loop_start))
            if run.eval_batch is not None and due(done, trainer.eval_interval, last):
                run.logger.log({"step": done, "eval_action_mse": eval_action_mse(run.unwrapped, run.eval_batch)})
            stopping = stop.agreed() and done < last
            if due(done, trainer.save_interval, last) or stopping:
                save_training_checkpoint(run, done)
            if stopping:
                raise preemption.Preempted(stop.signal_name, done, ckpt.state_dir(run.checkpoints_dir, done))
        save_final_model(run)
    if accelerator.is_main_process:
        plot_loss_curve(run.run_dir)
        log.info("done: %s", run.run_dir)
    accelerator.wait_for_everyone()
    return run.run_dir


def log_step(run: Run, values: dict[str, torch.Tensor], timings: dict[str, float], done: int) -> None:
    """Collective on log steps: the step's device values join the window; every logging_frequency steps the
    window is reduced over ranks (mean, plus the loss maxima) and the main process writes one metrics record."""
    cfg, accumulation = run.cfg, run.cfg.trainer.gradient_accumulation_steps
    run.window.add(values)
    log_now = due(done, cfg.trainer.logging_frequency, cfg.trainer.max_train_steps)
    reduced = run.window.reduce(run.accelerator.gather) if log_now else None
    if run.logger is None:
        return
    samples = cfg.datasets.vla_data.per_device_batch_size * accumulation * run.accelerator.num_processes
    run.logger.record(timings, samples=samples)
    run.logger.advance(done)
    if reduced is not None:
        lrs = {f"learning_rate/{g['name']}": g["lr"] for g in run.optimizer.param_groups}
        epoch = {"epoch": run.batch_order.position(done * accumulation)[0]}
        run.logger.flush(done, reduced | lrs | peak_memory_mb(run.accelerator.device) | epoch)


def save_final_model(run: Run) -> None:
    """Checks that the replicas agree, then writes final_model/pytorch_model.pt (collective: every rank calls it)."""
    checksums = replica_weight_checksums(run.accelerator, run.unwrapped)
    state_dict = run.accelerator.get_state_dict(run.model)  # every rank: ZeRO-3 gathers the shards here
    if run.accelerator.is_main_process:
        run.logger.log({"step": run.cfg.trainer.max_train_steps, "replica_weight_checksums": checksums})
        final = ckpt.weights_to_save(state_dict, run.left_out)
        ckpt.save_weights(final, run.run_dir / "final_model" / "pytorch_model.pt")


def replica_weight_checksums(accelerator: Accelerator, model: torch.nn.Module) -> list[float]:
    """One checksum of the trainable weights per rank; replicas that drifted apart stop the run."""
    local = torch.stack([p.detach().double().sum() for p in model.parameters() if p.requires_grad]).sum()
    checksums = accelerator.gather(local.reshape(1).to(accelerator.device)).tolist()
    if len(set(checksums)) > 1:
        raise TrainingError(f"the ranks ended with different weights (checksums {checksums}); this is a bug, please report it")
    return checksums


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


def save_training_checkpoint(run: Run, step: int) -> None:
    """Collective (every rank calls it): weights from the main process, every rank's share of the training state,
    each published atomically."""
    accelerator, checkpoints_dir = run.accelerator, run.checkpoints_dir
    is_main = accelerator.is_main_process
    staging = ckpt.staging_dir(checkpoints_dir, step)
    weights_name = ckpt.weights_path(checkpoints_dir, step).name
    state_dict = accelerator.get_state_dict(run.model)  # every rank: ZeRO-3 gathers the shards here
    if is_main:
        kept = ckpt.weights_to_save(state_dict, run.left_out)
        ckpt.save_weights(kept, checkpoints_dir / weights_name)
        ckpt.append_summary(run.run_dir, step)
        ckpt.discard_partial(staging)
    accelerator.wait_for_everyone()
    if is_deepspeed(accelerator):
        ckpt.space_checked(staging, lambda: run.model.save_checkpoint(str(staging), tag="deepspeed",
                                                                      exclude_frozen_parameters=True))
        ckpt.save_rank_state(staging, accelerator.process_index, accelerator.device, scheduler=run.scheduler if is_main else None)
    else:
        ckpt.save_rank_state(
            staging, accelerator.process_index, accelerator.device,
            optimizer=run.optimizer if is_main else None, scheduler=run.scheduler if is_main else None,
        )
    accelerator.wait_for_everyone()
    # Every rank hashes a share of the files (the list comes from the main process, so all hash the same list).
    names = broadcast_object_list([ckpt.manifest_names(staging, checkpoints_dir / weights_name) if is_main else None])[0]
    shares = gather_object([ckpt.manifest_share(staging, names, accelerator.process_index, accelerator.num_processes)])
    if is_main:
        trainer_state = {"step": step, "weights": weights_name, "num_processes": accelerator.num_processes,
                         ckpt.MANIFEST: {name: digest for share in shares for name, digest in share.items()}}
        ckpt.publish_state(checkpoints_dir, step, trainer_state, keep_last=run.cfg.trainer.keep_last_states)
    accelerator.wait_for_everyone()


def main(argv: list[str] | None = None) -> int:
    configure_logging()  # each message once in train.log, rank-tagged where rank-specific
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
        check_shared_run_dir(accelerator, cfg.run_root_dir)  # every node must see the run dir
        with run_dirs.claimed(accelerator, cfg):
            train(cfg, accelerator)
    except (run_dirs.RunDirError, resumption.ResumeError, preemption.Preempted, heartbeat.RankStalled,
            MetricsFileError, resources.ResourceError) as stopped:
        print(f"{prefix}{type(stopped).__name__}: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except ConfigError as error:  # the same on every rank: said once
        if accelerator.is_main_process:
            print(f"config error: {error}", file=sys.stderr)
        return 2
    except (DataError, TrainingError, CheckpointMismatchError, ckpt.DiskFullError) as error:
        print(f"{prefix}{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
