"""Resources checked before they are spent: memory against what this machine has, data workers against its cores,
and, after the first step, how long the run will take.

Host: every process on this node holds its weights while loading, plus one micro-batch of float32 frames in its
own hands and `prefetch_factor` more in each data worker. Device: the doctor's estimate (weights, optimizer
shares, activations; +-30%) against the device's total memory. On a CPU-only host the device estimate is host
memory too. Over the limit is a ResourceError naming the numbers and the fix, before the weights load or workers start;
`trainer.ignore_resource_check` lets an expert start anyway.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.facts import num_output_frames
from DiT4DiT.doctor.memory_estimate import GIB, estimate_training_memory, mixture_views, safetensors_param_count

log = logging.getLogger(__name__)

PREFETCH_FACTOR = 2  # torch DataLoader's default: batches each worker keeps ready
# A worker's own pages (interpreter state it writes, parquet tables, decoder buffers): ~0.1 GiB measured on the
# tiny data, more on real episodes; 64 workers of a 2-process run took > 6 GiB.
WORKER_PROCESS_BYTES = GIB // 4
WEIGHT_PARTS = ("text_encoder", "transformer", "vae")


class ResourceError(DiT4DiTError):
    """The run would need more memory than this machine has; no weights were loaded yet."""

    exit_code = 2


@dataclass(frozen=True)
class HostNeed:
    processes: int
    weights: int  # bytes per process, as loaded
    batch: int  # bytes of one micro-batch of frames
    workers: int
    training: int  # bytes per process that train on the host (CPU device), else 0; the weights included

    @property
    def per_process(self) -> int:
        return (max(self.weights, self.training) + self.batch * (1 + self.workers * PREFETCH_FACTOR)
                + self.workers * WORKER_PROCESS_BYTES)

    @property
    def total(self) -> int:
        return self.processes * self.per_process

    def describe(self) -> str:
        model = (f"{self.training / GIB:.1f} GiB training on the host (weights included)" if self.training > self.weights
                 else f"{self.weights / GIB:.1f} GiB weights")
        return (f"{self.processes} process(es) x ({model} + micro-batch of frames "
                f"{self.batch / GIB:.2f} GiB x (1 + {self.workers} workers x {PREFETCH_FACTOR} prefetched) + "
                f"{self.workers} workers x {WORKER_PROCESS_BYTES / GIB:.2f} GiB) = {self.total / GIB:.1f} GiB")


def frames_batch_bytes(data: DictConfig, views: int) -> int:
    """One micro-batch as the data yields it: float32 (frames, 3, size, size x views) per sample."""
    frames = num_output_frames(data.video_delta_indices, data.action_video_freq_ratio)
    return data.per_device_batch_size * frames * 3 * data.image_size * data.image_size * views * 4


def available_host_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def device_total_bytes(device: torch.device) -> int | None:
    if device.type == "cpu":
        return None
    return torch.get_device_module(device).get_device_properties(device).total_memory


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_resources(cfg: DictConfig, num_processes: int, device: torch.device) -> list[str]:
    """ResourceError when memory would run out (unless trainer.ignore_resource_check); returns warnings to log."""
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # as torchrun sets it: processes on this node
    data, base_model = cfg.datasets.vla_data, Path(cfg.framework.cosmos25.base_model)
    views = mixture_views(data.data_mix, data.data_config)
    estimate = estimate_training_memory(base_model, cfg, num_processes, views, device_kind=device.type)
    weight_bytes = 4 if cfg.framework.cosmos25.torch_dtype == "float32" else 2
    weights = sum(safetensors_param_count(base_model / part) or 0 for part in WEIGHT_PARTS) * weight_bytes
    on_host = device_total_bytes(device) is None
    training = int(estimate.total_gib * GIB) if estimate is not None and on_host else 0
    host = HostNeed(local_processes, weights, frames_batch_bytes(data, views), data.num_workers, training)
    problems, warnings = [], []
    available = available_host_bytes()
    if available is not None and host.total > available:
        problems.append(f"host memory: need ~{host.describe()} > {available / GIB:.1f} GiB available; lower "
                        "datasets.vla_data.num_workers, per_device_batch_size or image_size, or run fewer processes per node")
    total = device_total_bytes(device)
    if estimate is not None and total is not None and estimate.total_gib * GIB > total:
        problems.append(f"device memory: need ~{estimate.total_gib:.1f} GiB/device (weights+optimizer "
                        f"{estimate.static_gib:.1f}, activations {estimate.activation_gib:.1f} at batch "
                        f"{data.per_device_batch_size}) > {total / GIB:.1f} GiB on {device}; lower "
                        "datasets.vla_data.per_device_batch_size or image_size, or use more processes (ZeRO-2)")
    cores = usable_cores()
    if data.num_workers * local_processes > cores:
        warnings.append(f"datasets.vla_data.num_workers={data.num_workers} x {local_processes} process(es) = "
                        f"{data.num_workers * local_processes} data workers for {cores} cores: they compete with the "
                        "trainers for the cores; lower num_workers")
    if problems and cfg.trainer.ignore_resource_check:
        return warnings + [f"{p} (trainer.ignore_resource_check is set: starting anyway)" for p in problems]
    if problems:
        raise ResourceError("; ".join(problems) + " (an expert may start anyway with --trainer.ignore_resource_check true)")
    return warnings


def time_to_finish(done: int, start_step: int, last: int, seconds: float) -> str:
    """The line after the first step: a run that will take hours says so at once (first steps are the slowest)."""
    per_step = seconds / max(done - start_step, 1)
    left = (last - done) * per_step
    hours, rest = divmod(int(left), 3600)
    return (f"step {done} of {last} took {per_step:.2f} s: the {last - done} steps left take about {hours} h "
            f"{rest // 60} min at this pace")
