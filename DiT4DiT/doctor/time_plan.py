"""python -m DiT4DiT.doctor.time_plan [--mfu 0.3] [--base_model DIR]

How long a run takes, projected: each device's model FLOPs per optimizer step (DiT4DiT/doctor/step_flops.py: the step as
the config trains it, per-device batch x gradient accumulation) at an assumed MFU of each device's bf16 dense peak,
in seconds per step and hours for trainer.max_train_steps, on an A3 die, an A2 device and an H200. A projection,
not a measurement: the MFU is assumed (bench/device_check.py measures a device's), and the optimizer step,
collectives and data waits are left out. The doctor prints it for the config it checks; this command prints
docs/full-size.md's table for the original's four configs (on the real 2B sizes, a shapes-only snapshot).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection, TrainerSection
from DiT4DiT.errors import run_main
from DiT4DiT.doctor.step_flops import PLANNED_DEVICES, planned_peak_tflops, snapshot_configs, training_step_flops

PROG = "python -m DiT4DiT.doctor.time_plan"
ASSUMED_MFU = 0.3  # a round figure for a DiT of this size on these devices until device_check measures one


def step_tflop(base_model: Path, framework: FrameworkSection, trainer: TrainerSection, data: DatasetsVlaDataSection,
               views: int) -> float:
    """Model TFLOP one device computes per optimizer step."""
    flops = training_step_flops(*snapshot_configs(base_model), framework, trainer, data, views,
                                data.per_device_batch_size)
    return flops.total * trainer.gradient_accumulation_steps / 1e12


def projections(tflop: float, max_train_steps: int, mfu: float) -> dict[str, tuple[float, float]]:
    """Device -> (seconds per step, hours for the run) at `mfu` of its peak."""
    result = {}
    for label in PLANNED_DEVICES:
        seconds = tflop / (planned_peak_tflops(label) * mfu)
        result[label] = (seconds, seconds * max_train_steps / 3600)
    return result


def plan_line(base_model: Path, framework: FrameworkSection, trainer: TrainerSection, data: DatasetsVlaDataSection,
              views: int, mfu: float = ASSUMED_MFU) -> str:
    """The doctor's time_plan line."""
    tflop = step_tflop(base_model, framework, trainer, data, views)
    cells = "; ".join(f"{label} {seconds:.2f} s/step, {hours:.0f} h" for label, (seconds, hours)
                      in projections(tflop, trainer.max_train_steps, mfu).items())
    return (f"projection at an assumed {mfu:.0%} MFU: {tflop:.1f} TFLOP per device per step (batch "
            f"{data.per_device_batch_size} x {trainer.gradient_accumulation_steps} accumulation): {cells} for "
            f"{trainer.max_train_steps} steps (optimizer, collectives and data waits not included)")


def table(argv: list[str]) -> int:
    from DiT4DiT.config.schema import load_config
    from DiT4DiT.facts import REPO
    from DiT4DiT.memory.estimate import mixture_views
    from DiT4DiT.memory.plan import ORIGINAL_CONFIGS

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[2])
    parser.add_argument("--mfu", type=float, default=ASSUMED_MFU, help="assumed MFU (default %(default)s)")
    parser.add_argument("--base_model", help="a snapshot folder (default: the real 2B sizes, headers only)")
    args = parser.parse_args(argv)
    if not 0 < args.mfu <= 1:
        parser.error(f"--mfu {args.mfu}: give a fraction in (0, 1]")
    with tempfile.TemporaryDirectory() as tmp:
        if args.base_model:
            base_model = Path(args.base_model)
        else:
            from DiT4DiT.tools.full_size_cosmos import write_shapes_only

            base_model = write_shapes_only(Path(tmp) / "Cosmos-Predict2.5-2B-shapes")
        devices = list(PLANNED_DEVICES)
        print(f"| config (as shipped) | TFLOP per device per step | "
              + " | ".join(f"{d} ({planned_peak_tflops(d):.0f} TFLOPS) s/step, hours" for d in devices) + " |")
        print("|---|---|" + "---|" * len(devices))
        for name, path in ORIGINAL_CONFIGS.items():
            typed = load_config(str(REPO / path), [])
            framework, trainer, data = typed.framework, typed.trainer, typed.datasets.vla_data
            views = mixture_views(data.data_mix, data.data_config)
            tflop = step_tflop(base_model, framework, trainer, data, views)
            cells = [f"{seconds:.2f}, {hours:.0f} h" for seconds, hours
                     in projections(tflop, trainer.max_train_steps, args.mfu).values()]
            print(f"| {name} (batch {data.per_device_batch_size}, {trainer.max_train_steps} steps) | {tflop:.1f} | "
                  + " | ".join(cells) + " |")
        print(f"\nat an assumed {args.mfu:.0%} MFU of each device's bf16 dense peak (DiT4DiT/doctor/step_flops.py)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: table(sys.argv[1:] if argv is None else argv), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
