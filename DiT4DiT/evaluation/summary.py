"""Success-rate results: one JSON per task as a batch evaluation goes, and a summary over a folder of them.

    python -m DiT4DiT.evaluation.summary --log_dir RESULTS_DIR

writes RESULTS_DIR/success_rate_summary.json and .txt (per-task rates, average, highest, lowest), like the
original's utils/calculate_*_success_rate.py, but from structured results instead of parsed logs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.errors import run_main
from DiT4DiT.evaluation.errors import BadArgument

RESULT_SUFFIX = ".result.json"
SUMMARY_NAME = "success_rate_summary"


def wilson_interval(successes: int, episodes: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate; unlike the normal approximation it stays inside [0, 1] and
    is not empty at 0 or N successes out of N."""
    if episodes == 0:
        return 0.0, 1.0
    p = successes / episodes
    centre = (p + z * z / (2 * episodes)) / (1 + z * z / episodes)
    half = z * math.sqrt(p * (1 - p) / episodes + z * z / (4 * episodes * episodes)) / (1 + z * z / episodes)
    return max(0.0, centre - half), min(1.0, centre + half)


def task_result(suite: str, task: str, successes: list[bool]) -> dict:
    """The outcomes of one task's episodes, their rate and its 95% interval."""
    won = int(sum(successes))
    return {"suite": suite, "task": task, "episodes": len(successes), "successes": won,
            "success_rate": won / max(len(successes), 1), "ci95": list(wilson_interval(won, len(successes))),
            "outcomes": [bool(s) for s in successes]}


def write_task_result(out_dir: Path, suite: str, task: str, successes: list[bool]) -> Path:
    """<out_dir>/<suite>__<task>.result.json with the episode outcomes and their rate."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{suite}__{task}")
    path = Path(out_dir) / f"{safe}{RESULT_SUFFIX}"
    write_json_atomic(path, task_result(suite, task, successes))
    return path


def summarize(log_dir: Path) -> dict:
    """Collect every task result under log_dir; write the summary JSON and text beside them and return it."""
    log_dir = Path(log_dir)
    results = [json.loads(p.read_text()) for p in sorted(log_dir.glob(f"*{RESULT_SUFFIX}"))]
    if not results:
        raise BadArgument(f"{log_dir}: no *{RESULT_SUFFIX} task results; run an evaluation into it first")
    rates = [r["success_rate"] for r in results]
    suites: dict[str, list[float]] = {}
    for r in results:
        suites.setdefault(r["suite"], []).append(r["success_rate"])
    summary = {
        "tasks": len(results),
        "episodes": sum(r["episodes"] for r in results),
        "average_success_rate": sum(rates) / len(rates),
        "highest": max(rates),
        "lowest": min(rates),
        "suites": {name: sum(v) / len(v) for name, v in suites.items()},
        "per_task": {f"{r['suite']}/{r['task']}": r["success_rate"] for r in results},
    }
    write_json_atomic(log_dir / f"{SUMMARY_NAME}.json", summary)
    (log_dir / f"{SUMMARY_NAME}.txt").write_text(render(summary))
    return summary


def render(summary: dict) -> str:
    lines = [f"{task}: {rate:.4f} ({rate * 100:.2f}%)" for task, rate in summary["per_task"].items()]
    lines += ["", *(f"suite {name}: {rate:.4f}" for name, rate in summary["suites"].items())]
    lines += ["", f"Total tasks: {summary['tasks']}, episodes: {summary['episodes']}",
              f"Average success rate: {summary['average_success_rate']:.4f} "
              f"({summary['average_success_rate'] * 100:.2f}%)",
              f"Highest: {summary['highest']:.4f}  Lowest: {summary['lowest']:.4f}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.evaluation.summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log_dir", required=True, help="folder the evaluation wrote its task results into")
    args = parser.parse_args(argv)
    return run_main(lambda: print(render(summarize(Path(args.log_dir))), end=""))


if __name__ == "__main__":
    sys.exit(main())
