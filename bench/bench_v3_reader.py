"""Indexing a LeRobot v3.0 folder (episodes share files) vs the same content as v2.1, as the episode count grows.

    .venv/bin/python bench/bench_v3_reader.py [--episodes 16 64]

A v3.0 data file holds many episodes; reading it once per episode would make the index pass grow with
episodes x file size. Prints the index-pass time of both layouts per episode count and the v3.0 / v2.1 ratio
(ratios within one run; absolute times depend on the machine's other load).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from DiT4DiT.dataloader.index import load_index
from DiT4DiT.dataloader.reader import DatasetLayout
from DiT4DiT.tools.tiny_dataset import generate


def index_seconds(folder: Path, cache: Path) -> float:
    layout = DatasetLayout(folder)
    start = time.perf_counter()
    load_index(layout, ["action", "observation.state"], "task_index", cache)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for count in args.episodes:
            seconds = {}
            for version in ("v2.1", "v3.0"):
                root = Path(scratch) / f"{version}-{count}"
                generate("robotwin_task1", root, episodes=count, frames=(20, 20), height=16, width=16, version=version)
                seconds[version] = index_seconds(root / "adjust_bottle", Path(scratch) / f"cache-{version}-{count}")
            print(f"{count:4d} episodes: index pass v2.1 {seconds['v2.1'] * 1e3:7.1f} ms, v3.0 "
                  f"{seconds['v3.0'] * 1e3:7.1f} ms, ratio v3.0/v2.1 {seconds['v3.0'] / seconds['v2.1']:.2f}")


if __name__ == "__main__":
    main()
