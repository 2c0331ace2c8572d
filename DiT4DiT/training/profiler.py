"""trainer.profile_steps: a profiler trace of chosen optimizer steps in the run folder, and their top operators
(self time, calls, share) in train.log.

`profile_steps: "10,12"` records optimizer steps 10 to 12 (counted from 1, as the logs count them), data wait
included, with the profiler API the training file hands in: torch.profiler on CPU and CUDA, whose trace
(<run_dir>/profile/rank<r>...pt.trace.json) Perfetto and TensorBoard read; torch_npu.profiler on NPU (through
the NPU patch), whose folder (<run_dir>/profile/rank<r>_.../ASCEND_PROFILER_OUTPUT) MindStudio Insight reads and
whose op_statistic.csv (device time per operator type) the table then comes from. Every rank records its own
trace; the main process logs its table and writes it to <run_dir>/profile/top_operators.json. The step after the
last profiled one waits for the trace to be written (on NPU its analysis takes minutes).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from DiT4DiT.config.validate import profiled_steps

log = logging.getLogger(__name__)

FOLDER = "profile"
TABLE_FILE = "top_operators.json"
TOP = 20
ASCEND_TABLE = "op_statistic.csv"  # torch_npu's per-operator-type summary, under ASCEND_PROFILER_OUTPUT
STEP_MARK = "ProfilerStep"  # the span around each step (key_averages: ProfilerStep*): its self time is every gap


@dataclass(frozen=True)
class OperatorRow:
    name: str
    self_ms: float  # over all profiled steps
    calls: int
    share: float  # of the profiled steps' summed self time, in [0, 1]


def _rows(names_times_calls: list[tuple[str, float, int]]) -> list[OperatorRow]:
    total = sum(t for _, t, _ in names_times_calls) or 1.0
    top = sorted(names_times_calls, key=lambda row: row[1], reverse=True)[:TOP]
    return [OperatorRow(name, round(ms, 3), calls, round(ms / total, 4)) for name, ms, calls in top]


def torch_rows(profile, device_type: str) -> list[OperatorRow]:
    """The top operators of a torch.profiler run by self time: device time on an accelerator, CPU time on a CPU."""
    on_device = device_type != "cpu"
    return _rows([(event.key, (event.self_device_time_total if on_device else event.self_cpu_time_total) / 1000.0,
                   int(event.count)) for event in profile.key_averages()
                  if not event.key.startswith(STEP_MARK)])


def ascend_rows(folder: Path) -> list[OperatorRow]:
    """The top operator types of a torch_npu.profiler run, from the newest op_statistic.csv under `folder`
    (columns OP Type, Core Type, Count, Total Time(us), ...)."""
    tables = sorted(folder.rglob(ASCEND_TABLE), key=lambda p: p.stat().st_mtime)
    if not tables:
        return []
    with open(tables[-1], newline="") as stream:
        records = list(csv.DictReader(stream))
    return _rows([(f"{r['OP Type']} ({r.get('Core Type', '?')})", float(r["Total Time(us)"]) / 1000.0,
                   int(float(r["Count"]))) for r in records])


def table_lines(rows: list[OperatorRow], steps: tuple[int, int]) -> list[str]:
    first, last = steps
    lines = [f"top operators of steps {first}-{last} by self time:",
             f"  {'self ms':>10}  {'calls':>7}  {'share':>6}  operator"]
    lines += [f"  {r.self_ms:>10.1f}  {r.calls:>7d}  {r.share:>6.1%}  {r.name}" for r in rows]
    return lines


class StepProfiler:
    """Records optimizer steps `steps` (first, last) of a run that continues from `start_step`; `step(done)` after
    each optimizer step. `api`: torch.profiler or torch_npu.profiler (same calls, its own output format)."""

    def __init__(self, api, steps: tuple[int, int], start_step: int, run_dir: Path, rank: int, is_main: bool,
                 device_type: str):
        self.steps, self.folder, self.is_main, self.device_type = steps, Path(run_dir) / FOLDER, is_main, device_type
        first, last = steps
        before = first - 1 - start_step  # optimizer steps this run takes before the first profiled one
        warmup = 1 if before >= 1 else 0  # the profiler's own start-up is not timed
        names = ["CPU"] + (["NPU"] if device_type == "npu" else ["CUDA"] if device_type == "cuda" else [])
        self.profile = api.profile(
            activities=[getattr(api.ProfilerActivity, name) for name in names],
            schedule=api.schedule(skip_first=before - warmup, wait=0, warmup=warmup, active=last - first + 1,
                                  repeat=1),
            on_trace_ready=self._ready(api.tensorboard_trace_handler(str(self.folder), worker_name=f"rank{rank}")))
        self.rows: list[OperatorRow] | None = None
        self.profile.start()

    def _ready(self, write_trace):
        def ready(profile) -> None:
            write_trace(profile)
            # torch's profile sums its events itself; torch_npu's writes them to files its analysis fills
            has_events = hasattr(profile, "key_averages")
            self.rows = torch_rows(profile, self.device_type) if has_events else ascend_rows(self.folder)
            if self.is_main:
                log.info("\n".join([*table_lines(self.rows, self.steps), f"  trace: {self.folder}"]))
                payload = {"steps": list(self.steps), "rows": [asdict(r) for r in self.rows]}
                (self.folder / TABLE_FILE).write_text(json.dumps(payload, indent=1))
        return ready

    def step(self, done: int) -> None:
        """After optimizer step `done`: the schedule moves on; past the last profiled step the profiler stops."""
        if self.profile is None:
            return
        self.profile.step()
        if done >= self.steps[1]:
            self.close()

    def close(self) -> None:
        if self.profile is not None:
            profile, self.profile = self.profile, None
            profile.stop()


class NoProfiler:
    """trainer.profile_steps unset (or all its steps before the run's start): nothing to record."""

    def step(self, done: int) -> None:
        pass


@contextlib.contextmanager
def step_profiler(api, profile_steps: str | None, start_step: int, run_dir: Path, rank: int, is_main: bool,
                  device_type: str) -> Iterator[StepProfiler | NoProfiler]:
    """trainer.profile_steps' profiler around the loop (stopped however the loop ends), or a NoProfiler."""
    steps = profiled_steps(profile_steps)
    if steps is not None and steps[1] <= start_step:
        log.info("trainer.profile_steps=%s: the run continues from step %d, after them; nothing is profiled",
                 profile_steps, start_step)
    if steps is None or steps[1] <= start_step:
        yield NoProfiler()
        return
    profiler = StepProfiler(api, (max(steps[0], start_step + 1), steps[1]), start_step, run_dir, rank, is_main,
                            device_type)
    try:
        yield profiler
    finally:
        profiler.close()
