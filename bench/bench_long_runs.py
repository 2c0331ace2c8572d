"""What the long-run safeguards cost: checkpoint hashing, the per-step stop vote, the up-front video probe; and how
often a two-process gloo group's end hangs with a plain destroy_process_group and with ours.

    PYTHONPATH=. python bench/bench_long_runs.py [--hash-mib 256] [--processes 1 2 4] [--teardowns 32]

Figures are ratios or rates within this run; the 2B extrapolation is printed with its assumptions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from DiT4DiT.training import checkpoint as ckpt
from DiT4DiT.training.process_group import destroy_process_group

# A 2B transformer + action head: bf16 weights file; ZeRO-2 fp32 master weights + two Adam moments, sharded.
PARAMS_2B = 2.2e9
STATE_BYTES_2B = PARAMS_2B * 2 + PARAMS_2B * 12


def hash_rate(mib: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "blob"
        path.write_bytes(os.urandom(mib * 2**20))
        start = time.perf_counter()
        ckpt.file_digest(path)
        return mib / (time.perf_counter() - start)


def _steps(count: int, step_s: float, grads: torch.Tensor, stop=None) -> float:
    """Seconds per step of: host busy for step_s, a gradient all-reduce (what keeps ranks in step), the vote."""
    start = time.perf_counter()
    for _ in range(count):
        deadline = time.perf_counter() + step_s
        while time.perf_counter() < deadline:
            pass
        dist.all_reduce(grads)
        if stop is not None:
            stop.agreed()
    return (time.perf_counter() - start) / count


def _vote_worker(rank: int, world: int, port: int, steps: int, step_s: float, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from DiT4DiT.training.preemption import StopSignal

    grads = torch.zeros(2**18)  # 1 MiB of "gradients"
    _steps(20, step_s, grads)  # warm-up
    without = _steps(steps, step_s, grads)
    stop = StopSignal().install()
    with_vote = _steps(steps, step_s, grads, stop)
    stop.uninstall()
    if rank == 0:
        out.put((without, with_vote))
    destroy_process_group(everyone_here=True)


def vote_cost(world: int, steps: int = 200, step_s: float = 0.01) -> tuple[float, float]:
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_vote_worker, args=(world, 29655 + world, steps, step_s, queue), nprocs=world, start_method="spawn")
    return queue.get()


def _teardown_worker(rank: int, world: int, port: int, ours: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for value in range(8):  # small gathers, the last right before the end: as a prompt-store fill ends
        gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(gathered, torch.tensor([value]))
    if ours:
        destroy_process_group(everyone_here=True)
    else:  # accelerate's wait_for_everyone, then torch's destroy
        dist.barrier()
        dist.destroy_process_group()


def _teardown_hangs(port: int, ours: bool, timeout_s: float) -> bool:
    """Whether one two-process launch was still running after `timeout_s` (then its processes are killed)."""
    launch = mp.start_processes(_teardown_worker, args=(2, port, ours), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not launch.join(timeout=max(deadline - time.monotonic(), 0.1)):
        if time.monotonic() >= deadline:
            for process in launch.processes:
                process.kill()
            return True
    return False


def teardown_hangs(launches: int, timeout_s: float = 30.0) -> dict[str, int]:
    """Hung launches out of `launches` for each way of ending; two launches run at once, to load the machine as a
    test suite or a second job does."""
    from concurrent.futures import ThreadPoolExecutor

    hangs = {}
    for name, ours in (("plain destroy_process_group", False), ("process_group.destroy_process_group", True)):
        ports = [30000 + 2 * i + (1000 if ours else 0) for i in range(launches)]
        with ThreadPoolExecutor(2) as pool:
            hangs[name] = sum(pool.map(lambda port: _teardown_hangs(port, ours, timeout_s), ports))
    return hangs


def probe_rate(root: Path) -> tuple[int, float]:
    from DiT4DiT.dataloader.checks import _probe

    videos = sorted(root.rglob("*.mp4"))
    start = time.perf_counter()
    for path in videos:
        _probe(path, 0)
    return len(videos), (time.perf_counter() - start) / max(len(videos), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hash-mib", type=int, default=256)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--videos", type=Path, default=Path("playground/Datasets/robotwin_tiny"))
    parser.add_argument("--teardowns", type=int, default=32, help="two-process launches per way of ending (0: none)")
    args = parser.parse_args()

    rate = hash_rate(args.hash_mib)
    print(f"sha256 of a checkpoint file: {rate:.0f} MiB/s per process")
    for ranks in (1, 16):
        seconds = STATE_BYTES_2B / 2**20 / rate / ranks
        print(f"  2B training state (~{STATE_BYTES_2B / 2**30:.0f} GiB), hashed by {ranks} rank(s): {seconds:.0f} s per save")
    for world in args.processes:
        without, with_vote = vote_cost(world)
        print(f"stop vote, {world} process(es): a step (10 ms host work + 1 MiB all-reduce) takes "
              f"{with_vote * 1e3:.2f} ms with the vote vs {without * 1e3:.2f} ms without ({with_vote / without:.3f}x)")
    if args.videos.is_dir():
        count, per_video = probe_rate(args.videos)
        print(f"video probe: {count} videos, {per_video * 1e3:.1f} ms each (open + one decoded frame); "
              f"15000 RoboTwin videos ~ {15000 * per_video / 60:.1f} min once, then cached")
    if args.teardowns:
        for name, hung in teardown_hangs(args.teardowns).items():
            print(f"end of a two-process gloo group, {name}: {hung} of {args.teardowns} launches hung")


if __name__ == "__main__":
    main()
