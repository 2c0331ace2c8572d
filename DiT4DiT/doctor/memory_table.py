"""python -m DiT4DiT.doctor.memory_table [--processes N] [--base_model DIR]

docs/full-size.md's table: the original's four configs on each device of DiT4DiT/memory/plan.py, fits as is or the
smallest change that does; by default on the real 2B sizes (a snapshot of headers only, written to a temporary
folder).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from DiT4DiT.errors import UsageError, run_main
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

PROG = "python -m DiT4DiT.doctor.memory_table"


def table(argv: list[str]) -> int:
    from DiT4DiT.facts import REPO
    from DiT4DiT.memory.plan import ORIGINAL_CONFIGS, fits_table

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[2])
    parser.add_argument("--processes", type=int, default=16, help="processes of the job (default 16)")
    parser.add_argument("--base_model", help="a snapshot folder (default: the real 2B sizes, headers only)")
    args = parser.parse_args(argv)
    configs = {name: REPO / path for name, path in ORIGINAL_CONFIGS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        if args.base_model:
            base_model = Path(args.base_model)
            problems = pipeline_folder_problems(base_model)
            if problems:  # an empty folder gave a traceback, or a table without weights to count
                raise UsageError(f"--base_model {base_model}: {problems[0]}")
        else:
            from DiT4DiT.tools.full_size_cosmos import write_shapes_only

            base_model = write_shapes_only(Path(tmp) / "Cosmos-Predict2.5-2B-shapes")
        print("\n".join(fits_table(base_model, configs, args.processes)))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: table(sys.argv[1:] if argv is None else argv), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
