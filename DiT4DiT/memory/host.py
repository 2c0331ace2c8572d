"""Host memory a training run needs on one node: the trainer's resource check and the doctor read this one rule
(standard library only, so the doctor runs without torch).

Every process on the node holds its weights while loading (4 B per parameter in float32, else 2 B), plus one
micro-batch of float32 frames in its own hands and `PREFETCH_FACTOR` more in each data worker, plus each worker's
own pages; a run that trains on the host needs its device estimate instead of the weights (it includes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from DiT4DiT.config.sections import DatasetsVlaDataSection
from DiT4DiT.facts import DTYPE_BYTES
from DiT4DiT.memory.estimate import GIB, safetensors_param_count

PREFETCH_FACTOR = 2  # torch DataLoader's default: batches each worker keeps ready
# A worker's own pages (interpreter state it writes, parquet tables, decoder buffers): ~0.1 GiB measured on the
# tiny data, more on real episodes; 64 workers of a 2-process run took > 6 GiB.
WORKER_PROCESS_BYTES = GIB // 4
WEIGHT_PARTS = ("text_encoder", "transformer", "vae")


def weight_bytes(base_model: Path, torch_dtype: str) -> int:
    """Bytes of the pipeline's weights as a process loads them (parts without safetensors count 0)."""
    return sum(safetensors_param_count(Path(base_model) / part) or 0 for part in WEIGHT_PARTS) * DTYPE_BYTES[torch_dtype]


def frames_batch_bytes(data: DatasetsVlaDataSection, views: int) -> int:
    """One micro-batch as the data yields it: float32 (frames, 3, size, size x views) per sample."""
    frames = data.num_frames
    return data.per_device_batch_size * frames * 3 * data.image_size * data.image_size * views * 4


def read_meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes ({} where there is none): what the node has, for the trainer's check and the doctor."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines if line.split()[1:2] and line.split()[1].isdigit()}


@dataclass(frozen=True)
class HostNeed:
    processes: int
    weights: int  # bytes per process, as loaded
    batch: int  # bytes of one micro-batch of frames
    workers: int
    training: int = 0  # bytes per process that train on the host (CPU device), else 0; the weights included

    @classmethod
    def of(cls, data: DatasetsVlaDataSection, torch_dtype: str, base_model: Path, processes: int, views: int,
           training: int = 0) -> "HostNeed":
        """The need of `processes` processes on one node loading `base_model` in `torch_dtype`
        (framework.cosmos25.torch_dtype) with these data settings."""
        return cls(processes, weight_bytes(base_model, torch_dtype), frames_batch_bytes(data, views), data.num_workers,
                   training)

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
