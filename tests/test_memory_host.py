"""memory/host.py: the host memory one node's training processes need, the rule the trainer and the doctor share."""

from __future__ import annotations

from DiT4DiT.memory.estimate import GIB, safetensors_param_count
from DiT4DiT.memory.host import PREFETCH_FACTOR, WORKER_PROCESS_BYTES, HostNeed, read_meminfo, weight_bytes


def test_weights_count_every_part_in_the_loading_dtype(tiny_pipeline_dir):
    params = sum(safetensors_param_count(tiny_pipeline_dir / part) or 0
                 for part in ("text_encoder", "transformer", "vae"))
    assert params > 0
    assert weight_bytes(tiny_pipeline_dir, "bfloat16") == 2 * params
    assert weight_bytes(tiny_pipeline_dir, "float32") == 4 * params


def test_each_process_holds_its_weights_a_batch_and_each_workers_prefetched_batches():
    need = HostNeed(processes=8, weights=10 * GIB, batch=GIB // 2, workers=4)
    per_process = 10 * GIB + GIB // 2 * (1 + 4 * PREFETCH_FACTOR) + 4 * WORKER_PROCESS_BYTES
    assert need.per_process == per_process and need.total == 8 * per_process
    assert need.describe() == ("8 process(es) x (10.0 GiB weights + micro-batch of frames 0.50 GiB x (1 + 4 workers "
                               f"x {PREFETCH_FACTOR} prefetched) + 4 workers x 0.25 GiB) = {8 * per_process / GIB:.1f} GiB")


def test_a_run_training_on_the_host_counts_its_device_estimate_instead_of_the_weights():
    need = HostNeed(processes=1, weights=GIB, batch=0, workers=0, training=3 * GIB)
    assert need.per_process == 3 * GIB
    assert need.describe().startswith("1 process(es) x (3.0 GiB training on the host (weights included)")


def test_meminfo_is_read_in_bytes():
    info = read_meminfo()
    assert info["MemTotal"] > GIB and info["MemTotal"] % 1024 == 0
