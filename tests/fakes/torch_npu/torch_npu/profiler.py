"""Test double for `torch_npu.profiler`: the calls the trainer makes (profile with start/step/stop, schedule,
ProfilerActivity, tensorboard_trace_handler) with the real one's signatures, recording on the CPU through
torch.profiler underneath. Its trace handler writes what the real analysis writes and the trainer reads:
<dir>/<worker>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv (the real columns; CPU self time where the
real one has device time) beside trace_view.json. Like the real profile object, it has no key_averages."""

from __future__ import annotations

import csv
import enum
import time
from pathlib import Path

import torch.profiler as _torch

OP_STATISTIC_COLUMNS = ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                        "Max Time(us)", "Ratio(%)"]


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


def schedule(wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0):
    return _torch.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None, analyse_flag: bool = True,
                              async_mode: bool = False):
    def handler(profile: "profile") -> None:
        out = Path(dir_name) / f"{worker_name}_{time.time_ns()}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        events = [e for e in profile._inner.key_averages() if e.self_cpu_time_total > 0]
        total = sum(e.self_cpu_time_total for e in events) or 1.0
        with open(out / "op_statistic.csv", "w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(OP_STATISTIC_COLUMNS)
            for e in events:
                average = e.self_cpu_time_total / e.count
                writer.writerow([e.key, "AI_CORE", e.count, e.self_cpu_time_total, average, average, average,
                                 round(100 * e.self_cpu_time_total / total, 2)])
        profile._inner.export_chrome_trace(str(out / "trace_view.json"))

    return handler


class profile:
    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False, experimental_config=None):
        if any(not isinstance(a, ProfilerActivity) for a in activities or ()):
            raise TypeError(f"torch_npu.profiler takes torch_npu.profiler.ProfilerActivity values, got {activities}")
        ready = (lambda inner: on_trace_ready(self)) if on_trace_ready else None
        self._inner = _torch.profile(activities=[_torch.ProfilerActivity.CPU], schedule=schedule, on_trace_ready=ready)

    def start(self) -> None:
        self._inner.start()

    def step(self) -> None:
        self._inner.step()

    def stop(self) -> None:
        self._inner.stop()
