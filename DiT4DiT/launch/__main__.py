"""python -m DiT4DiT.launch [options] --dry-run   (scripts/train_8p.sh passes --shell_plan FILE to launch)

Prints the plan (dry run) or writes it for the script; exit 2 with every problem and its fix when preflight
refuses to start, or with the one-line reason when the options or the config cannot work at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from DiT4DiT.errors import run_main
from DiT4DiT.launch.options import PROG
from DiT4DiT.requirements_check import TRAINING, require


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: launch(sys.argv[1:] if argv is None else argv), PROG)


def launch(argv: list[str]) -> int:
    require(PROG, TRAINING, launcher=True)  # --help too: the trainer runs with this Python
    shell_plan = None
    if argv[:1] and argv[0].startswith("--shell_plan="):
        shell_plan, argv = argv[0].split("=", 1)[1], argv[1:]
    # No torch_npu autoload here: resolving mixture names imports torch, and this runs before CANN is sourced.
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    from DiT4DiT.launch import options, plan as planning

    opts = options.parse(argv, Path.cwd())
    plan = planning.build(opts)
    if opts.dry_run or shell_plan is None:
        print(planning.dry_run(plan))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if plan.problems:
        print(f"preflight: {len(plan.problems)} problem(s), nothing started:", file=sys.stderr)
        print("\n".join(f"  {p}" for p in plan.problems), file=sys.stderr)
        return 2
    if opts.dry_run or shell_plan is None:
        print("preflight: ok" + ("" if opts.dry_run else f"; launch it with bash {PROG} (same options)"))
        return 0
    Path(shell_plan).write_text(planning.shell(plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
