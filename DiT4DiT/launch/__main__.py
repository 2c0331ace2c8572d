"""python -m DiT4DiT.launch [options] [--dry-run]   (what scripts/train_8p.sh runs)

Plans the launch (DiT4DiT/launch/plan.py), prints it with --dry-run, and otherwise runs it
(DiT4DiT/launch/supervise.py). Exit 2 with every problem and its fix when preflight refuses to start, or with
the one-line reason when the options or the config cannot work at all; else the trainer's exit status.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from DiT4DiT.errors import run_main
from DiT4DiT.launch.options import PROG
from DiT4DiT.requirements_check import TRAINING, require


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        decided = prepare(sys.argv[1:] if argv is None else argv)
        if isinstance(decided, int):
            return decided
        from DiT4DiT.launch import supervise

        return supervise.train(decided)

    return run_main(body, PROG)


def prepare(argv: list[str]):
    """The plan to run, or the exit status when there is nothing to run (--help, --dry-run, refused); what a
    person needs to read is printed here."""
    require(PROG, TRAINING, launcher=True)  # --help too: the trainer runs with this Python
    environment = dict(os.environ)  # the trainer's, before the line below
    # No torch_npu autoload should anything here import torch (a --device=cuda probe, a memory plan): CANN is not
    # sourced yet.
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    from DiT4DiT.launch import options, plan as planning

    opts = options.parse(argv, Path.cwd())
    plan = planning.build(opts, planning.Facts(env=environment))
    if opts.dry_run:
        print(planning.dry_run(plan))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if plan.problems:
        print(f"preflight: {len(plan.problems)} problem(s), nothing started:", file=sys.stderr)
        print("\n".join(f"  {p}" for p in plan.problems), file=sys.stderr)
        return 2
    if opts.dry_run:
        print("preflight: ok")
        return 0
    return plan


if __name__ == "__main__":
    raise SystemExit(main())
