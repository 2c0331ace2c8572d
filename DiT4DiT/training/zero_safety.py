"""ZeRO-1/2 `overlap_comm` is turned off on a DeepSpeed that can corrupt gradients with it (one warning).

In DeepSpeed before 0.19.0, `runtime/zero/stage_1_and_2.py` reduces gradient buckets on a side stream
(`average_tensor` -> `allreduce_and_scatter` -> `allreduce_and_copy_with_multiple_ranks`, and
`allreduce_and_copy`) without `record_stream` on the buffers it reads and writes there, so the caching
allocator may hand their memory to new tensors while the reduction still runs (DeepSpeed PR #7965, first
released in 0.19.0). NPUs take that path: `NPU_Accelerator.resolves_data_dependency()` is False. With
overlap off, the reduction runs on the compute stream and the race cannot happen; it costs the overlap of
gradient communication with the backward pass. docs/training.md says how to turn it back on.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.version import Version

log = logging.getLogger(__name__)

FIRST_SAFE = Version("0.19.0")  # contains PR #7965 (and #7805, which ended the ping-pong index reset of #6993)
OVERRIDE_KEY = "trainer.allow_unsafe_zero_overlap"


def installed_deepspeed() -> Version | None:
    try:
        return Version(version("deepspeed"))
    except PackageNotFoundError:
        return None


def overlap_is_unsafe(ds_config: dict[str, Any], deepspeed_version: Version) -> bool:
    """ZeRO stage 1 or 2 with overlap_comm on (DeepSpeed's default is on for stage 3 only), before the fixes."""
    zero = ds_config.get("zero_optimization") or {}
    stage = int(zero.get("stage", 0))
    overlap = zero.get("overlap_comm")
    return stage in (1, 2) and overlap is True and deepspeed_version < FIRST_SAFE


def make_overlap_safe(ds_config: dict[str, Any], allow_unsafe: bool, deepspeed_version: Version | None = None) -> bool:
    """Turn overlap_comm off in `ds_config` (in place) where it is unsafe, unless the expert key keeps it.

    Returns whether the config was changed.
    """
    deepspeed_version = deepspeed_version or installed_deepspeed()
    if deepspeed_version is None or not overlap_is_unsafe(ds_config, deepspeed_version):
        return False
    stage = ds_config["zero_optimization"]["stage"]
    if allow_unsafe:
        log.warning("ZeRO-%s overlap_comm stays on with DeepSpeed %s (%s=true): this DeepSpeed lacks the fix of "
                    "DeepSpeed PR #7965, so gradients may be silently wrong; compare a few steps with it off",
                    stage, deepspeed_version, OVERRIDE_KEY)
        return False
    ds_config["zero_optimization"]["overlap_comm"] = False
    log.warning("ZeRO-%s overlap_comm turned off: DeepSpeed %s can corrupt gradients with it (fixed in %s, DeepSpeed "
                "PR #7965); gradient reduction no longer overlaps the backward pass. Keep it with --%s true "
                "(see docs/training.md)", stage, deepspeed_version, FIRST_SAFE, OVERRIDE_KEY)
    return True
