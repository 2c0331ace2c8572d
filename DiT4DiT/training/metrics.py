"""What the user sees: a progress bar, metrics.jsonl, wandb (offline by default) and a loss-curve PNG."""

from __future__ import annotations

import json
import os
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from DiT4DiT.atomic_files import atomic_write
from DiT4DiT.config.sections import ConfigSections, TrainerLossScaleSection, TrainerSection
from DiT4DiT.config.typed import plain_values
from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.training.closed_loop_eval import METRIC_PREFIX as EVALUATION_PREFIX

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
LOSS_CURVE_FILE = "loss_curve.png"
# The original DiT4DiT's wandb names for metrics we name otherwise: wandb carries both, so dashboards built on
# the original's runs keep working (two extra charts, not a copy of every chart). metrics.jsonl keeps ours.
ORIGINAL_NAMES = {"action_loss": "action_dit_loss", "eval_action_mse": "mse_score"}
WANDB_EVALUATION = "closed_loop/"  # closed-loop results in wandb, where closed_loop/step is their step axis


def wandb_mode(configured: str | None) -> str:
    """The config's wandb_mode when set (YAML or command line), else an exported WANDB_MODE, else offline."""
    return configured or os.environ.get("WANDB_MODE") or "offline"


@dataclass(frozen=True)
class WandbRun:
    """What wandb.init is given: the run's names and mode, and the whole config as wandb's record of the run."""

    project: str
    entity: str | None
    name: str
    mode: str
    config: dict

    @classmethod
    def of(cls, cfg: ConfigSections) -> "WandbRun":
        return cls(cfg.wandb_project, cfg.wandb_entity, cfg.run_id, wandb_mode(cfg.wandb_mode),
                   plain_values(cfg))


def with_original_names(record: dict, future_video_scale: float) -> dict:
    """`record` plus the original's names: action_dit_loss, mse_score, and future_video_loss_scaled (the video
    loss as it enters the total)."""
    extra = {theirs: record[ours] for ours, theirs in ORIGINAL_NAMES.items() if ours in record}
    if "future_video_loss" in record:
        scale = TrainerLossScaleSection(future_video=future_video_scale)
        extra["future_video_loss_scaled"] = scale.scaled_video(record["future_video_loss"])
    return record | extra


# Keys of the record written once the loop is over, after the last save: a resume from that save writes it again.
CLOSING_KEYS = ("replica_weight_checksums",)


class MetricsFileError(DiT4DiTError):
    """metrics.jsonl is damaged where no kill can have damaged it; resuming would mix good and bad records."""

    exit_code = 2


class DeviceWindow:
    """Every rank's per-step values over a logging window, summed on the device: nothing is read in between.

    At a log step every rank calls `reduce` (one collective, one host read): each value's mean over the window's
    steps and all ranks, plus `<name>_max`, the largest per-step value on any rank, for each loss.
    """

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.maxima: dict[str, torch.Tensor] = {}
        self.steps = 0

    def add(self, values: dict[str, torch.Tensor]) -> None:
        for name, value in values.items():
            value = value.detach().float().reshape(())
            self.sums[name] = self.sums[name] + value if name in self.sums else value
            if name.endswith("loss"):
                self.maxima[name] = torch.maximum(self.maxima[name], value) if name in self.maxima else value
        self.steps += 1

    def reduce(self, gather: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, float]:
        """Collective over ranks (`gather` = accelerator.gather); every rank gets the same record."""
        names, maxima = sorted(self.sums), sorted(self.maxima)
        local = torch.stack([self.sums[n] / self.steps for n in names] + [self.maxima[n] for n in maxima])
        per_rank = gather(local.reshape(1, -1)).reshape(-1, local.numel()).cpu()
        record = dict(zip(names, per_rank[:, : len(names)].mean(dim=0).tolist()))
        record.update({f"{n}_max": v for n, v in zip(maxima, per_rank[:, len(names):].amax(dim=0).tolist())})
        self.sums.clear()
        self.maxima.clear()
        self.steps = 0
        return record


class MetricsLogger:
    """Averages per-micro-step values over a logging window and writes them to every tracker.

    Built on the main process only; other ranks log nothing.
    """

    def __init__(self, trainer: TrainerSection, run_dir: Path, start_step: int, trackers: Sequence[str],
                 wandb_run: WandbRun | None = None):
        """`trackers`: the config's; `wandb_run` opens the wandb run when they include wandb."""
        self.run_dir = run_dir
        self.trackers = list(trackers)
        self.bar = tqdm(total=trainer.max_train_steps, initial=start_step, desc="train", dynamic_ncols=True)
        self.window: dict[str, list[float]] = defaultdict(list)
        self.window_start = time.perf_counter()
        self.window_samples = 0
        self.wandb_run = None
        self.future_video_scale = trainer.loss_scale.future_video
        if "wandb" in self.trackers:
            if wandb_run is None:
                raise TypeError("MetricsLogger with the wandb tracker needs wandb_run (WandbRun.of(cfg))")
            import wandb  # heavy, and only needed when this tracker is on

            self.wandb_run = wandb.init(**asdict(wandb_run), group="vla-train", dir=str(run_dir), resume="allow")
            # Closed-loop results arrive after later steps were logged: they carry their own step axis.
            self.wandb_run.define_metric(f"{WANDB_EVALUATION}*", step_metric=f"{WANDB_EVALUATION}step")

    def record(self, values: dict[str, float], samples: int) -> None:
        """Values of one optimizer step (losses, timings); `samples` = global samples it consumed."""
        for key, value in values.items():
            self.window[key].append(value)
        self.window_samples += samples

    def advance(self, step: int) -> None:
        self.bar.update(step - self.bar.n)  # the losses join the bar's postfix at each flush

    def flush(self, step: int, extra: dict[str, float]) -> dict[str, float]:
        """Write the window's averages (plus `extra`, e.g. learning rates) as one record at `step`."""
        elapsed = time.perf_counter() - self.window_start
        record: dict[str, float] = {"step": step}
        record.update({k: sum(v) / len(v) for k, v in self.window.items()})
        record.update(extra)
        record["samples_per_s"] = self.window_samples / elapsed if elapsed > 0 else 0.0
        self.bar.set_postfix(
            {k: f"{record[k]:.4f}" for k in ("total_loss",) if k in record} | {"samples/s": f"{record['samples_per_s']:.1f}"}
        )
        self.log(record)
        self.window.clear()
        self.window_samples = 0
        self.window_start = time.perf_counter()
        return record

    def log(self, record: dict) -> None:
        self._append(record)
        if self.wandb_run is not None:
            values = {k: v for k, v in record.items() if k != "step"}
            self.wandb_run.log(with_original_names(values, self.future_video_scale), step=record["step"])

    def log_evaluation(self, record: dict) -> None:
        """A closed-loop result, tagged with the (earlier) step of the checkpoint it evaluated: in metrics.jsonl as
        it is, in wandb under closed_loop/ against closed_loop/step (wandb drops a step below its last one)."""
        self._append(record)
        if self.wandb_run is not None:
            self.wandb_run.log({f"{WANDB_EVALUATION}{k.removeprefix(EVALUATION_PREFIX)}": v for k, v in record.items()})

    def _append(self, record: dict) -> None:
        if "jsonl" in self.trackers:
            with open(self.run_dir / METRICS_FILE, "a") as f:
                f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self.bar.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trim_metrics(run_dir: Path, step: int) -> None:
    """On resume from `step`: keep each step's records once. Drops every record the resumed run writes again (those
    after `step`, and the closing record), and a last line cut off by a kill (with a warning); replaced atomically."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except UnicodeDecodeError as error:
        raise MetricsFileError(f"{path}: not UTF-8 text (byte {error.start}), not the run's JSON lines; restore it "
                               "from a backup of the run folder, or remove it, then resume again") from None
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines):
                raise MetricsFileError(f"{path}, line {number}: not valid JSON, and not the last line (which a kill "
                                       "can cut off); repair or remove the line, then resume again") from None
            log.warning("%s: dropped its last line, cut off when the run was killed: %r", path, line[:80])
            continue
        if not isinstance(records[-1], dict):
            raise MetricsFileError(f"{path}, line {number}: a JSON {type(records[-1]).__name__}, not a record "
                                   "(an object per line); repair or remove the line, then resume again")
    kept = [r for r in records if r.get("step", 0) <= step and not any(key in r for key in CLOSING_KEYS)]
    atomic_write(path, lambda tmp: tmp.write_text("".join(json.dumps(r) + "\n" for r in kept)))


def plot_loss_curve(run_dir: Path) -> Path | None:
    """loss_curve.png from metrics.jsonl: one line per loss, eval MSE as points; below, when the run has them, the
    closed-loop success rates with their 95% intervals."""
    records = read_metrics(run_dir)
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on training hosts
    import matplotlib.pyplot as plt

    rate = f"{EVALUATION_PREFIX}success_rate"
    evaluations = sorted((r for r in records if rate in r), key=lambda r: r["step"])
    fig, axes = plt.subplots(2 if evaluations else 1, 1, figsize=(7, 6.5 if evaluations else 4), dpi=110,
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": [3, 2][:1 + bool(evaluations)]})
    ax = axes[0, 0]
    keys = sorted({k for r in records for k in r if k.endswith("loss") or k == "eval_action_mse"})
    for key in keys:
        points = [(r["step"], r[key]) for r in records if key in r]
        style = "o" if key == "eval_action_mse" else "-"
        ax.plot(*zip(*points), style, label=key, markersize=4)
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    ax.legend()
    if evaluations:
        ax = axes[1, 0]
        steps = [r["step"] for r in evaluations]
        rates = [r[rate] for r in evaluations]
        below = [r[rate] - r[f"{EVALUATION_PREFIX}ci95_low"] for r in evaluations]
        above = [r[f"{EVALUATION_PREFIX}ci95_high"] - r[rate] for r in evaluations]
        ax.errorbar(steps, rates, yerr=[below, above], fmt="o-", capsize=3, color="tab:green",
                    label="closed-loop success (95% interval)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("success rate")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[-1, 0].set_xlabel("optimizer step")
    fig.tight_layout()
    path = run_dir / LOSS_CURVE_FILE
    try:  # written after the final model: a full disk here costs the picture, not the run
        fig.savefig(path)
    except OSError as error:
        log.warning("%s not written (%s); metrics.jsonl holds the same values", path, error.strerror or error)
        return None
    finally:
        plt.close(fig)
    return path
