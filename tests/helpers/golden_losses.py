"""The first 20 losses of the tiny run on CPU, kept in tests/golden/tiny_losses.json and compared exactly.

    python -m tests.helpers.golden_losses           # a fresh run against the file: the steps that differ
    python -m tests.helpers.golden_losses --write   # rewrite this CPU vendor's losses, for a change meant to move them

The run: the tiny pipeline (weight seed 0) and the three-task tiny RoboTwin set (data seed 0) the session
fixtures write, the tiny config (seed 42), one process in-process, one intra-op thread, every step logged. Exact
floats hold for one CPU stack; the file records torch's version and CPU capability it was written on, and the
kernels are capped at AVX2 (cpu_kernels.py), so that any x86 machine with AVX2 or more reproduces it. The losses
are kept per CPU vendor: MKL's capped kernels give equal results across one vendor's processors, but an Intel and
an AMD machine differ in the last bit of a few losses (cpu_kernels.cpu_vendor).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .cpu_kernels import cpu_vendor, pin_avx2_kernels

pin_avx2_kernels()  # before torch loads its kernels: as the test suite runs (tests/conftest.py)
import torch  # noqa: E402

from .fixtures_data import TINY_TASKS
from .training_runs import metrics, train_in_process

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tiny_losses.json"
STEPS = 20
COMMAND = "python -m tests.helpers.golden_losses --write"
OVERRIDES = (f"--trainer.max_train_steps={STEPS}", "--trainer.logging_frequency=1",
             f"--trainer.save_interval={STEPS}", f"--trainer.eval_interval={STEPS}")


def run_tiny(pipeline: Path, data: Path, run_root: Path, run_id: str = "golden") -> Path:
    """The golden run (its last checkpoint is checkpoints/steps_20_pytorch_model.pt); returns its run dir."""
    result = train_in_process(pipeline, data, run_root, run_id, *OVERRIDES)
    if result.returncode != 0:
        raise RuntimeError(f"the tiny run failed with exit code {result.returncode}:\n{result.stderr[-3000:]}")
    return run_root / run_id


def losses(run_dir: Path) -> list[float]:
    return [record["total_loss"] for record in metrics(run_dir) if "total_loss" in record]


def stack() -> dict[str, str]:
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def read() -> dict:
    return json.loads(GOLDEN.read_text())


def differences(fresh: list[float], golden: dict) -> list[str]:
    """One line per step whose loss is not bit-equal to the file's for this CPU vendor, plus what differs in the
    stack; a vendor the file has no losses for is one line saying how to add them."""
    vendor = cpu_vendor()
    if vendor not in golden["losses"]:
        return [f"{GOLDEN.name} has losses for {', '.join(golden['losses'])} CPUs, none for {vendor}: run {COMMAND} "
                "on this machine, check that the new losses differ from the others in the last bits only, and commit"]
    expected = golden["losses"][vendor]
    lines = [f"step {step}: {old!r} in the file, {new!r} now" for step, (old, new)
             in enumerate(zip(expected, fresh), start=1) if old != new]
    if len(fresh) != len(expected):
        lines.append(f"{len(fresh)} losses now, {len(expected)} in the file")
    lines += [f"{key}: {golden[key]} in the file, {value} here" for key, value in stack().items() if golden.get(key) != value]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {GOLDEN.name} from a fresh run")
    args = parser.parse_args(argv)
    from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline
    from DiT4DiT.tools.tiny_robotwin import generate

    with tempfile.TemporaryDirectory() as tmp:
        pipeline = write_tiny_pipeline(Path(tmp) / "Cosmos-Predict2.5-tiny")
        generate(Path(tmp) / "robotwin_tiny", seed=0, tasks=TINY_TASKS)
        fresh = losses(run_tiny(pipeline, Path(tmp) / "robotwin_tiny", Path(tmp) / "runs"))
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        # Another vendor's losses stay only while the stack is the one they were written on.
        kept = read()["losses"] if GOLDEN.exists() and all(read().get(k) == v for k, v in stack().items()) else {}
        GOLDEN.write_text(json.dumps({"command": COMMAND, **stack(), "losses": {**kept, cpu_vendor(): fresh}},
                                     indent=1) + "\n")
        print(f"wrote {len(fresh)} losses for {cpu_vendor()} CPUs to {GOLDEN}")
        return 0
    found = differences(fresh, read())
    print("\n".join(found) or f"all {len(fresh)} losses equal {GOLDEN}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
