"""Resources checked before they are spent: memory against what this machine has, data workers against its cores,
and, after the first step, how long the run will take.

Host: every process on this node holds its weights while loading, plus one micro-batch of float32 frames in its
own hands and `prefetch_factor` more in each data worker (DiT4DiT/memory/host.py, the doctor's rule too). Device: the doctor's estimate (weights, optimizer
shares, activations; +-30%) against the device's total memory. On a CPU-only host the device estimate is host
memory too. Over the limit is a ResourceError naming the numbers and the fix, before the weights load or workers start;
`trainer.ignore_resource_check` lets an expert start anyway.
"""

from __future__ import annotations

import logging
import os

import torch

from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection, TrainerSection
from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.memory.host import HostNeed, read_meminfo
from DiT4DiT.memory.estimate import GIB, estimate_training_memory, mixture_views
from DiT4DiT.memory.plan import HEADROOM, fewest_recomputed_blocks
from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape

log = logging.getLogger(__name__)


class ResourceError(DiT4DiTError):
    """The run would need more memory than this machine has; no weights were loaded yet."""

    exit_code = 2


def device_total_bytes(device: torch.device) -> int | None:
    if device.type == "cpu":
        return None
    return int(torch.get_device_module(device).get_device_properties(device).total_memory)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_resources(framework: FrameworkSection, trainer: TrainerSection, data: DatasetsVlaDataSection,
                    num_processes: int, device: torch.device) -> list[str]:
    """ResourceError when memory would run out (unless trainer.ignore_resource_check); returns warnings to log."""
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # as torchrun sets it: processes on this node
    base_model = framework.cosmos25.base_model_folder
    views = mixture_views(data.data_mix, data.data_config)
    estimate = estimate_training_memory(base_model, framework, trainer, data, num_processes, views,
                                        device_kind=device.type)
    on_host = device_total_bytes(device) is None
    training = int(estimate.total_gib * GIB) if estimate is not None and on_host else 0
    host = HostNeed.of(data, framework.cosmos25.torch_dtype, base_model, local_processes, views, training)
    problems, warnings = [], []
    available = read_meminfo().get("MemAvailable")
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
    if problems and trainer.ignore_resource_check:
        return warnings + [f"{p} (trainer.ignore_resource_check is set: starting anyway)" for p in problems]
    if problems:
        raise ResourceError("; ".join(problems) + " (an expert may start anyway with --trainer.ignore_resource_check true)")
    return warnings


def auto_recomputed_blocks(framework: FrameworkSection, trainer: TrainerSection, data: DatasetsVlaDataSection,
                           num_processes: int, device: torch.device) -> tuple[int, str]:
    """trainer.gradient_checkpointing_blocks=auto on `device`: (blocks to recompute, why that many): the fewest
    whose estimate fits the memory plan's share of the device's memory (memory/plan.py: fewest_recomputed_blocks)."""
    base_model = framework.cosmos25.base_model_folder
    layers = read_pipeline_shape(base_model).num_blocks
    total = device_total_bytes(device)
    if total is None:
        return 0, f"none of {layers}: on {device} there is no device memory to plan for"
    limit = HEADROOM * total / GIB
    blocks = fewest_recomputed_blocks(base_model, framework, trainer, data, num_processes,
                                      mixture_views(data.data_mix, data.data_config), limit, kind=device.type)
    if blocks is None:
        return layers, f"all {layers}, and still over {limit:.1f} GiB ({HEADROOM:.0%} of {device}'s memory)"
    return blocks, f"{blocks} of {layers}, the fewest whose estimate fits {limit:.1f} GiB ({HEADROOM:.0%} of {device}'s memory)"


def time_to_finish(done: int, start_step: int, last: int, seconds: float) -> str:
    """The line after the first step: a run that will take hours says so at once (first steps are the slowest)."""
    per_step = seconds / max(done - start_step, 1)
    left = (last - done) * per_step
    hours, rest = divmod(int(left), 3600)
    return (f"step {done} of {last} took {per_step:.2f} s: the {last - done} steps left take about {hours} h "
            f"{rest // 60} min at this pace")
