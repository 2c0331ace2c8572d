"""Where the test suite's CPU time goes: a pytest plugin that records each test's CPU time, and a summary by group.

    SUITE_CPU_OUT=/tmp/cpu.jsonl python -m pytest -q -n 2 --dist loadgroup -p bench.suite_cpu
    python bench/suite_cpu.py /tmp/cpu.jsonl          # CPU-seconds and wall seconds per xdist group, then per test

A test's CPU time is its worker's own plus that of the processes it waited for (`accelerate launch` and its ranks
are waited for), fixtures made during the test included. On two cores the suite cannot take less wall time than
its CPU time over two, so this, not wall time on a busy machine, says what a change saved.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sys
import time

import pytest


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, cpu = time.monotonic(), _cpu()
    yield
    marker = item.get_closest_marker("xdist_group")
    record = {"test": item.nodeid, "group": marker.args[0] if marker else item.path.name,
              "cpu_s": round(_cpu() - cpu, 2), "wall_s": round(time.monotonic() - wall, 2),
              "worker": os.environ.get("PYTEST_XDIST_WORKER", "-")}
    with open(os.environ.get("SUITE_CPU_OUT", "suite_cpu.jsonl"), "a") as out:
        out.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("records", help="the JSON lines the plugin wrote")
    parser.add_argument("--top", type=int, default=20, help="groups and tests to list (default 20)")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in open(args.records)]
    cpu, wall = collections.Counter(), collections.Counter()
    for record in records:
        cpu[record["group"]] += record["cpu_s"]
        wall[record["group"]] += record["wall_s"]
    print(f"{len(records)} tests: {sum(cpu.values()):.0f} CPU-s, {sum(wall.values()):.0f} s of test wall time")
    print(f"{'CPU-s':>8} {'wall s':>8}  group")
    for group, seconds in cpu.most_common(args.top):
        print(f"{seconds:8.1f} {wall[group]:8.1f}  {group}")
    print(f"{'CPU-s':>8} {'wall s':>8}  test")
    for record in sorted(records, key=lambda r: -r["cpu_s"])[:args.top]:
        print(f"{record['cpu_s']:8.1f} {record['wall_s']:8.1f}  {record['test']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
