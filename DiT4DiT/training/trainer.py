"""The Trainer: a run's state (resume, data, model, schedule, prompts, saved state) and its bookkeeping (log,
evaluate, save, the final model). train.py owns the loop and the two device-specific pieces the NPU patch edits
(the optimizer and the train step); the Trainer never calls back into it, so this file holds no device code.
What a saved training state holds is the Checkpointer's (checkpoint.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedDataParallelKwargs, DistributedType, set_seed

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import ConfigSections, TrainerSection
from DiT4DiT.config.typed import replaced
from DiT4DiT.config.validate import has_action_head
from DiT4DiT.dataloader import build_vla_datasets, collate_fn, save_dataset_statistics
from DiT4DiT.facts import AUTO, DETERMINISTIC_ENV, is_under, module_paths
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules, left_out_of_checkpoints
from DiT4DiT.model.modules.activation_checkpointing import checkpointed_modules
from DiT4DiT.model.modules.cosmos_backbone import unused_parameters_expected
from DiT4DiT.model.modules.prompt_encoding import checkpoint_text_encoder_layers
from DiT4DiT.model.modules.node_store import Ranks
from DiT4DiT.model.modules.weights import load_trained_weights
from DiT4DiT.training import closed_loop_eval, heartbeat, preemption, replicas, resources, resume as resumption
from DiT4DiT.training import run_dir as run_dirs
from DiT4DiT.training.checkpoint import Checkpointer, Resume, load_weights, original_server_note, save_config
from DiT4DiT.training.host_waits import HostWaits
from DiT4DiT.training.metrics import DeviceWindow, MetricsLogger, WandbRun, plot_loss_curve, trim_metrics
from DiT4DiT.training.optim import build_lr_scheduler
from DiT4DiT.training.sampler import ResumableBatchOrder, iterate_batches
from DiT4DiT.training.unwrap import unwrap
from DiT4DiT.training.zero_safety import make_overlap_safe

log = logging.getLogger("dit4dit.train")


def build_accelerator(cfg: ConfigSections) -> Accelerator:
    """From the launch configuration (accelerate launch --config_file ...), plus what our config decides (the
    trainer section, the training mode and the batch)."""
    trainer = cfg.trainer
    # DDP looks for parameters without gradient (a graph traversal per step) only when the mode leaves some.
    # No buffer needs syncing (they are constants), and the released text encoder's are empty.
    ddp = DistributedDataParallelKwargs(find_unused_parameters=unused_parameters_expected(trainer.freeze_modules,
                                                                                         cfg.framework.cosmos25.training),
                                        broadcast_buffers=False)
    # Where triton is installed, deepspeed's import (here, in DeepSpeed runs) warms inductor's pool of compile
    # workers, processes that import torch again (a 2-step CPU ZeRO-2 run: 164 CPU-s with it, 44 without; the
    # launcher exports the same). The trainer compiles nothing.
    os.environ.setdefault("TORCH_WARM_POOL", "0")
    if trainer.deterministic:
        use_deterministic_kernels()
    # The process group is made here, with our timeout: InitProcessGroupKwargs would drop a value equal to its own
    # default (600 s, assumed for NCCL), leaving gloo and HCCL at torch's 30 minutes. DeepSpeed's init gets it too.
    PartialState(timeout=collective_timeout(trainer))
    accelerator = Accelerator(gradient_accumulation_steps=trainer.gradient_accumulation_steps, kwargs_handlers=[ddp])
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        # No dataloader goes through accelerator.prepare (we shard batches ourselves for exact resume), so
        # DeepSpeed cannot infer these "auto" values; the clip norm comes from our config, not the JSON.
        ds_config = accelerator.state.deepspeed_plugin.deepspeed_config
        ds_config["train_micro_batch_size_per_gpu"] = cfg.datasets.vla_data.per_device_batch_size
        ds_config["gradient_accumulation_steps"] = trainer.gradient_accumulation_steps
        ds_config["train_batch_size"] = cfg.global_batch(accelerator.num_processes)
        ds_config["gradient_clipping"] = trainer.gradient_clipping
        make_overlap_safe(ds_config, trainer.allow_unsafe_zero_overlap)
    return accelerator


def use_deterministic_kernels() -> None:
    """trainer.deterministic: torch's deterministic kernels (torch_npu turns on its deterministic mode with the
    same call), and the collectives' and cuBLAS's variables where the launcher did not export them, set before
    the process group starts HCCL/NCCL. On the CPU and CUDA an op without a deterministic kernel raises, naming
    itself; torch_npu's ops never raise (docs/long-runs.md says what NPU determinism covers).

    Uninitialised memory is not filled: with the flag on torch would NaN-fill every torch.empty (on an NPU host
    every host one too, pinned batch buffers included, torch_npu's EmptyTensor.cpp), and our code overwrites each
    buffer it allocates before reading it."""
    for variables in DETERMINISTIC_ENV.values():
        for name, value in variables.items():
            os.environ.setdefault(name, value)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    log.info("deterministic kernels on (trainer.deterministic): torch.use_deterministic_algorithms(True), %s",
             ", ".join(f"{n}={os.environ[n]}" for variables in DETERMINISTIC_ENV.values() for n in variables))


def collective_timeout(trainer: TrainerSection) -> timedelta:
    return timedelta(seconds=trainer.collective_timeout_s)


class Trainer:
    """Everything one training run needs, assembled in two calls, and the bookkeeping around each step:

        trainer = Trainer(cfg, accelerator)          # resume, data, model
        trainer.prepare(optimizer)                   # schedule, accelerate, prompts, saved state, metrics
        with trainer.running():                      # cleanup on every exit; the final model when the loop ends
            for step, micro_batches in trainer.steps():
                ...                                  # train.py's train_step
                trainer.after_step(step, metrics)    # log, evaluate, save, stop when preempted

    The optimizer comes from train.py (the NPU patch makes it fused) between the two calls: it is made from
    `trainer.model` and must exist before accelerate prepares the model and a saved optimizer state is restored.
    Collective: every rank builds its Trainer together (resume verification, prompt encoding and the
    accelerate preparation talk to the other ranks).
    """

    def __init__(self, cfg: ConfigSections, accelerator: Accelerator):
        if cfg.trainer.gradient_checkpointing_blocks == AUTO:  # a count from here on (config.yaml records it)
            blocks, why = resources.auto_recomputed_blocks(cfg.framework, cfg.trainer, cfg.datasets.vla_data,
                                                           accelerator.num_processes, accelerator.device)
            log.info("trainer.gradient_checkpointing_blocks=auto: %s", why)
            cfg = replaced(cfg, "trainer.gradient_checkpointing_blocks", str(blocks))
        settings, data_cfg = cfg.trainer, cfg.datasets.vla_data
        self.cfg, self.settings, self.accelerator = cfg, settings, accelerator
        self.run_dir = cfg.run_dir
        rank, world = accelerator.process_index, accelerator.num_processes
        # One-rank work (the index, the prompt store, checkpoint writes) is waited for on the host, not the device.
        self.waits = HostWaits(timedelta(seconds=settings.one_rank_timeout_s))
        self.checkpointer = Checkpointer(accelerator, self.run_dir, left_out_of_checkpoints(settings),
                                         settings.keep_last_states, self.waits)
        resume = self.checkpointer.find(settings.resume_weights_only) if settings.is_resume else None
        if resume:
            resumption.check_config_unchanged(cfg, self.run_dir, resume, world)
        self.resume = resume
        self.start_step = resume.step if resume else 0

        # Data: the same initial weights on every rank (per-rank randomness is seeded in prepare). Both splits
        # from one pass; one process per node indexes while the others wait, then read its cache.
        set_seed(cfg.seed)
        with self.waits.first(accelerator.is_local_main_process):
            datasets = build_vla_datasets(data_cfg, cfg.framework.action_model.chunk_length, cfg.seed,
                                          ("train", "eval") if has_action_head(cfg) else ("train",))
        self.train_set, self.eval_set = datasets["train"], datasets.get("eval")
        self.batch_order = ResumableBatchOrder(len(self.train_set), data_cfg.per_device_batch_size, rank, world, cfg.seed)
        for warning in resources.check_resources(cfg.framework, settings, data_cfg, world, accelerator.device):  # ResourceError when it cannot fit
            log.warning(warning)
        if resume:  # the run's statistics stay its statistics
            resumption.use_saved_statistics([d for d in (self.train_set, self.eval_set) if d is not None],
                                            self.run_dir / "dataset_statistics.json", accelerator.is_main_process)

        # The model, warm-started or resumed; train.py makes its optimizer and hands it to prepare().
        self.model = set_up_model(build_framework(cfg), settings, resume, self.checkpointer.deepspeed)

    def prepare(self, optimizer: torch.optim.Optimizer) -> None:
        """The schedule, the run dir's first files, accelerate's preparation (self.model and self.optimizer become
        the prepared ones), the prompts, then the saved optimizer state and RNG, or the schedule fast-forwarded."""
        cfg, settings, accelerator, resume = self.cfg, self.settings, self.accelerator, self.resume
        data_cfg, is_main = cfg.datasets.vla_data, accelerator.is_main_process
        train_set, eval_set = self.train_set, self.eval_set
        self.scheduler = build_lr_scheduler(optimizer, settings)
        if not resume and is_main:  # after every check of the config: a refused start writes nothing
            save_dataset_statistics(train_set.statistics(), self.run_dir / "dataset_statistics.json")
        if is_main and not (self.run_dir / "config.yaml").is_file():  # fresh, or weights only from a folder without
            save_config(cfg, self.run_dir / "config.yaml")
        self.model, self.optimizer = accelerator.prepare(self.model, optimizer)
        ranks = Ranks.from_accelerator(accelerator, self.waits.all_sum)
        # The model stores every instruction's embedding (encoded once, split across ranks) and releases the text encoder.
        self.unwrapped.prepare_prompts([*train_set.instructions(), *(eval_set.instructions() if eval_set else [])],
                                       ranks)
        # With framework.cosmos25.latent_cache: every clip's VAE posterior into the latent store (split across ranks);
        # the samples then carry it in place of frames.
        self.unwrapped.prepare_latents([d for d in (train_set, eval_set) if d is not None], ranks)
        if resume and resume.state is not None:  # not weights only
            self.checkpointer.restore(resume.state, self.model, self.optimizer, self.scheduler)
            log.info("resumed from %s at step %d", resume.state, self.start_step)
        else:
            resumption.fast_forward(self.scheduler, self.start_step)
            set_seed(cfg.seed + accelerator.process_index)

        start_micro_step = self.start_step * settings.gradient_accumulation_steps
        self.batches = iterate_batches(train_set, self.batch_order, start_micro_step, data_cfg.num_workers, collate_fn)
        self.window = DeviceWindow()  # every rank sums its values on the device
        self.eval_batch, self.logger = None, None  # the main process evaluates and writes the metrics
        self.closed_loop = None  # trainer.closed_loop_eval's side processes, started by the main process
        if is_main:
            if eval_set is not None:
                self.eval_batch = fixed_eval_batch(eval_set, data_cfg.per_device_batch_size, cfg.seed)
            if resume:
                trim_metrics(self.run_dir, self.start_step)
            self.logger = MetricsLogger(settings, self.run_dir, self.start_step, cfg.trackers, WandbRun.of(cfg))
            self.closed_loop = closed_loop_eval.evaluator(settings, self.run_dir, self.logger)
            self.banner(len(train_set))

    @property
    def unwrapped(self) -> torch.nn.Module:
        return unwrap(self.accelerator, self.model)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around the loop: the stop signal, the heartbeat and the cleanup on every exit (an error, a preemption);
        when the loop ends, the final model and the replica comparison, then the loss curve."""
        with contextlib.ExitStack() as cleanup:
            cleanup.enter_context(run_dirs.writes_lost_as_one_line(self.run_dir))  # exited last: sees every error
            if self.logger is not None:
                cleanup.callback(self.logger.close)
            self.stop = preemption.StopSignal().install(collective_timeout(self.settings))
            cleanup.callback(self.stop.uninstall)
            self.beat = heartbeat.start_heartbeat(self.settings.stall_timeout_s, collective_timeout(self.settings))
            cleanup.callback(self.beat.stop)
            # Shut the DataLoader workers down now: they ignore SIGTERM (so a preempted step can finish), so the
            # interpreter's exit could not stop them if the iterator were still alive then.
            cleanup.callback(self.batches.close)
            if self.closed_loop is not None:  # before the logger closes: the last result still reaches it
                cleanup.push(self.closed_loop.close)
            yield
            self.save_final_model()
        if self.accelerator.is_main_process:
            plot_loss_curve(self.run_dir)
            log.info("done: %s", self.run_dir)
            log.info(original_server_note(self.settings.save_full_state_dict, self.run_dir))
        self.waits.barrier()

    def steps(self) -> Iterator[tuple[int, list[list[dict]]]]:
        """(step, its gradient_accumulation_steps micro-batches) from the start step to the last; the wait for them
        is the step's data_time, the time until after_step its model_time."""
        self.loop_start = time.perf_counter()
        for step in range(self.start_step, self.settings.max_train_steps):
            data_start = time.perf_counter()
            micro_batches = [next(self.batches) for _ in range(self.settings.gradient_accumulation_steps)]
            self.data_start, self.model_start = data_start, time.perf_counter()
            yield step, micro_batches

    def after_step(self, step: int, values: dict[str, torch.Tensor]) -> None:
        """After optimizer step `step`: log, maybe evaluate and save; raises Preempted once every rank agreed to stop
        (after saving)."""
        settings, last, done = self.settings, self.settings.max_train_steps, step + 1
        self.beat.step = done
        self.log_step(values, {"data_time": self.model_start - self.data_start,
                               "model_time": time.perf_counter() - self.model_start}, done)
        if done == self.start_step + 1:
            log.info(resources.time_to_finish(done, self.start_step, last, time.perf_counter() - self.loop_start))
        # The main process holds both the eval batch and the logger.
        if self.eval_batch is not None and self.logger is not None and due(done, settings.eval_interval, last):
            self.logger.log({"step": done, "eval_action_mse": eval_action_mse(self.unwrapped, self.eval_batch)})
        stopping = self.stop.agreed() and done < last
        if due(done, settings.save_interval, last) or stopping:
            self.checkpointer.save(done, self.model, self.optimizer, self.scheduler)
        if self.closed_loop is not None:
            self.closed_loop.step(done)
        if stopping:
            raise preemption.Preempted(self.stop.signal_name, done, self.checkpointer.state_dir(done))

    def log_step(self, values: dict[str, torch.Tensor], timings: dict[str, float], done: int) -> None:
        """Collective on log steps: the step's device values join the window; every logging_frequency steps the
        window is reduced over ranks (mean, plus the loss maxima) and the main process writes one metrics record."""
        settings, accumulation = self.settings, self.settings.gradient_accumulation_steps
        self.window.add(values)
        log_now = due(done, settings.logging_frequency, settings.max_train_steps)
        reduced = self.window.reduce(self.accelerator.gather) if log_now else None
        if self.logger is None:
            return
        self.logger.record(timings, samples=self.cfg.global_batch(self.accelerator.num_processes))
        self.logger.advance(done)
        if reduced is not None:
            lrs = {f"learning_rate/{g['name']}": g["lr"] for g in self.optimizer.param_groups}
            epoch = {"epoch": self.batch_order.position(done * accumulation)[0]}
            self.logger.flush(done, reduced | lrs | peak_memory_mb(self.accelerator.device) | epoch)

    def save_final_model(self) -> None:
        """Collective: writes final_model/pytorch_model.pt, then compares the replicas (replicas.py): ranks that
        ended with different weights are a loud warning naming them and their tensors, never a lost run."""
        self.checkpointer.save_final(self.model)
        if replicas.sharded(self.unwrapped):
            log.info("replicas not compared: ZeRO-3 keeps each weight once, in shards")
            return
        checksums, differing = replicas.compare_replicas(self.accelerator, self.unwrapped)
        if differing and self.accelerator.is_main_process:
            log.warning("THE RANKS ENDED WITH DIFFERENT WEIGHTS (a bug, please report it); final_model holds rank 0's "
                        "weights:\n  %s", "\n  ".join(differing))
        if self.logger is not None:
            self.logger.log({"step": self.settings.max_train_steps, "replica_weight_checksums": checksums})

    def banner(self, training_samples: int) -> None:
        cfg, accelerator = self.cfg, self.accelerator
        params = list(self.unwrapped.parameters())
        trainable = sum(p.numel() for p in params if p.requires_grad)
        total = sum(p.numel() for p in params)
        batch, accumulation = cfg.datasets.vla_data.per_device_batch_size, self.settings.gradient_accumulation_steps
        log.info(
            "run dir %s | %d process(es), %s | batch %d/process x %d processes x %d accumulation = %d samples/step | "
            "%d training samples | parameters: %.2fM trainable of %.2fM | mode %s | steps %d -> %d",
            self.run_dir, accelerator.num_processes, accelerator.distributed_type.value, batch, accelerator.num_processes,
            accumulation, cfg.global_batch(accelerator.num_processes), training_samples, trainable / 1e6,
            total / 1e6, cfg.framework.cosmos25.training, self.start_step, self.settings.max_train_steps,
        )
        log.info(what_is_on(self.unwrapped, self.settings))


def what_is_on(model: torch.nn.Module, trainer: TrainerSection) -> str:
    """The start-up line of the settings that change what a step computes or keeps: the frozen modules, activation
    checkpointing (which modules' blocks, read from the model) and deterministic kernels."""
    frozen = ", ".join(module_paths(trainer.freeze_modules)) or "none"
    checkpointed = checkpointed_modules(model)
    checkpointing = f"on for {', '.join(checkpointed)}" if checkpointed else "off"
    deterministic = "on" if trainer.deterministic else "off"
    return (f"frozen modules: {frozen} (trainer.freeze_modules) | activation checkpointing: {checkpointing} "
            f"(trainer.enable_gradient_checkpointing) | deterministic kernels: {deterministic} (trainer.deterministic)")


def due(done: int, interval: int, last: int) -> bool:
    return done % interval == 0 or done == last


def set_up_model(model: torch.nn.Module, trainer: TrainerSection, resume: Resume | None,
                 deepspeed: bool) -> torch.nn.Module:
    """The built framework with its frozen modules (and its text encoder's layers checkpointed when asked),
    warm-started or resumed."""
    frozen = freeze_modules(model, trainer.freeze_modules)
    if trainer.text_encoder_gradient_checkpointing:
        checkpoint_text_encoder_layers(model.backbone_interface.extractor.text_encoder)
    if trainer.pretrained_checkpoint:
        load_pretrained(model, trainer.pretrained_checkpoint, trainer.reload_modules, frozen)
    if resume and (resume.weights_only or not deepspeed):  # DeepSpeed restores its own state
        load_trained_weights(model, load_weights(resume.weights, "trainer.is_resume"), resume.weights, may_be_missing=frozen)
    return model


def load_pretrained(model: torch.nn.Module, checkpoint: str, reload_modules: str | None, frozen: list[str]) -> None:
    """Warm start from `trainer.pretrained_checkpoint`: all its weights, or only `trainer.reload_modules`."""
    path = Path(checkpoint)
    state = load_weights(path)
    modules = module_paths(reload_modules)
    if modules:
        state = {k: v for k, v in state.items() if is_under(k, modules)}
        if not state:
            raise ConfigError(f"trainer.reload_modules: {path} holds no weights under {modules}")
        # The listed modules must load completely; everything else keeps its freshly built weights.
        others = [k for k in model.state_dict() if not is_under(k, modules)]
        load_trained_weights(model, state, path, may_be_missing=others)
    else:
        load_trained_weights(model, state, path, may_be_missing=frozen)
    log.info("loaded %d tensors from %s", len(state), path)


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


def fixed_eval_batch(eval_set, batch_size: int, seed: int) -> list[dict]:
    """The same held-out samples at every eval, drawn from their own generator (the training RNG is untouched)."""
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(len(eval_set), generator=generator)[:batch_size].tolist()
    return collate_fn([eval_set[i] for i in indices])


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """Host peak RSS of the run so far; device peak of the logging window (reset here)."""
    stats = {"host_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device.type != "cpu":
        stats["device_peak_mb"] = torch.get_device_module(device).max_memory_allocated(device) / 2**20
        torch.get_device_module(device).reset_peak_memory_stats(device)
    return stats

