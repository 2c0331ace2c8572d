"""bench/bench_step_work.py's tables: per round and median, wall or CPU seconds of the second step, ratios to the
original, a failed process named as such (the timing itself runs in tests/test_rehearsal_original.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_step_work", ROOT / "bench" / "bench_step_work.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def result(round_: int, side: str, wall: float, cpu: float, peak: float, exit_code: int = 0) -> dict:
    first = {"step_s": 99.0, "cpu_s": 99.0}  # the first step (warm-up) is never the figure
    return {"round": round_, "side": side, "exit": exit_code, "log": f"round{round_}.log", "peak_rss_gib": peak,
            "steps": [first, {"step_s": wall, "cpu_s": cpu}]}


def rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()[2:]]


def test_wall_and_cpu_tables_take_the_second_step_and_divide_by_the_original():
    results = [result(1, "ours", 30.0, 50.0, 5.0), result(1, "ours (store)", 10.0, 20.0, 4.0),
               result(1, "original", 40.0, 80.0, 8.0),
               result(2, "ours", 50.0, 52.0, 5.0), result(2, "ours (store)", 30.0, 22.0, 4.0),
               result(2, "original", 60.0, 84.0, 8.0)]
    wall, cpu = bench.table(results), bench.table(results, "cpu_s", "CPU s/step")
    assert "ours s/step" in wall.splitlines()[0] and "ours CPU s/step" in cpu.splitlines()[0]
    assert rows(wall) == [["1", "30.00", "10.00", "40.00", "0.75", "0.25", "5.00 / 4.00 / 8.00"],
                          ["2", "50.00", "30.00", "60.00", "0.83", "0.50", "5.00 / 4.00 / 8.00"],
                          ["median", "40.00", "20.00", "50.00", "0.80", "0.40", "5.00 / 4.00 / 8.00"]]
    assert rows(cpu)[2] == ["median", "51.00", "21.00", "82.00", "0.62", "0.26", "5.00 / 4.00 / 8.00"]


def test_a_failed_process_is_named_and_left_out_of_the_ratios():
    results = [result(1, "ours", 30.0, 50.0, 5.0), result(1, "ours (store)", 10.0, 20.0, 4.0, exit_code=1),
               result(1, "original", 40.0, 80.0, 8.0)]
    results[1].pop("steps")
    assert rows(bench.table(results))[0] == ["1", "30.00", "failed", "40.00", "0.75", "-", "5.00 / failed / 8.00"]
