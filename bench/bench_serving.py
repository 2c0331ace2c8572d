"""Policy server throughput and latency, batched against one request at a time, at 1, 4 and 8 clients, in one run.

    .venv/bin/python bench/bench_serving.py [--sizes tiny,128px] [--clients 1,4,8] [--requests 40]
        [--ckpt RUN/checkpoints/steps_N_pytorch_model.pt] [--device cpu] [--waits 0,5] [--before DIR]

Each size is a run trained for two steps by the real trainer in a temporary folder (tiny pipeline, tiny RoboTwin
data generated there): `tiny` at the tiny config's 32-pixel views, `128px` the same model at 128-pixel views (16
times the latent tokens, so the forward is compute-bound rather than overhead-bound); --ckpt serves a given run
instead. Per size, server processes (`python -m DiT4DiT.serving.server`, loopback, one torch thread on CPU) run
side by side: `one at a time` (--max_forward_batch 1, what the server did before batching) and `batched`
(--max_forward_batch 8) at each --waits value of --max_wait_ms. Each client is a thread of this process with its own
connection, sending batch-1 requests back to back (each example its own seed). The client counts are measured
in turn against every server, interleaved, so all see the same machine load. Per setting: latency p50 / p99
(send to reply, as a client sees it), requests/s over the wall time of all clients, the examples per forward the
server logged, and the ratio of requests/s to one-at-a-time. The load average before and after is printed: the
machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # runnable without an installed package

from tiny_runs import launch_training  # noqa: E402

from DiT4DiT.serving.client import PolicyClient  # noqa: E402

SIZES = {"tiny": (), "128px": ("--datasets.vla_data.image_size=128",)}


def trained_checkpoint(workdir: Path, size: str) -> Path:
    from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline
    from DiT4DiT.tools.tiny_robotwin import generate

    pipeline = workdir / "cosmos" / "Cosmos-Predict2.5-tiny"
    if not pipeline.is_dir():
        write_tiny_pipeline(pipeline)
        generate(workdir / "data", seed=0)  # the tiny RoboTwin tasks the tests train on
    result = launch_training(workdir / "runs", size, f"--framework.cosmos25.base_model={pipeline}",
                             f"--datasets.vla_data.data_root_dir={workdir / 'data'}", "--datasets.vla_data.num_workers=0",
                             "--trainer.max_train_steps=2", "--trainer.save_interval=2", *SIZES[size])
    if result.returncode:
        raise SystemExit(f"training the {size} run failed:\n{result.stderr[-3000:]}")
    return workdir / "runs" / size / "checkpoints" / "steps_2_pytorch_model.pt"


class Server:
    """A server process; its log lines are kept so that the examples per forward can be read back."""

    def __init__(self, ckpt: Path, device: str, *options: str, code: Path = REPO):
        env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS="1")
        self.process = subprocess.Popen([sys.executable, "-m", "DiT4DiT.serving.server", "--ckpt", str(ckpt), "--host",
                                         "127.0.0.1", "--port", "0", "--device", device, *options],
                                        cwd=code, env=env, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                raise SystemExit("the server exited before listening:\n" + "".join(self.lines[-20:]))
            self.lines.append(line)
            found = re.search(r"on ws://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                # Keep reading its log so that the pipe never fills and blocks the server.
                threading.Thread(target=lambda: self.lines.extend(self.process.stderr), daemon=True).start()
                return
        raise SystemExit("the server did not start listening within 600 s")

    def forward_sizes(self, since: int) -> list[int]:
        return [int(m.group(1)) for line in self.lines[since:] if (m := re.search(r"forward of (\d+)\)", line))]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


def request_for(metadata: dict, seed: int) -> dict:
    size, state_dim = int(metadata["image_size"]), int(metadata["state_dim"])
    rng = np.random.default_rng(seed)
    example = {"image": [rng.integers(0, 256, (size, 3 * size, 3), dtype=np.uint8)], "lang": "place the bottle",
               "seed": seed}
    if state_dim:
        example["state"] = rng.uniform(-1, 1, (1, state_dim)).astype(np.float32)
    return example


def measure(server: Server, clients: int, requests: int) -> tuple[list[float], float, list[int]]:
    """Latencies (s) of every request, the wall time and the examples per forward, `clients` connections sending
    `requests` each."""
    connections = [PolicyClient("127.0.0.1", server.port, wait_s=60) for _ in range(clients)]
    examples = [request_for(connections[0].metadata, seed) for seed in range(clients)]
    for client, example in zip(connections, examples):  # warm-up: first-request costs stay out
        client.infer([example])
    latencies: list[float] = []
    lock, start = threading.Lock(), threading.Barrier(clients + 1)

    def run(client: PolicyClient, example: dict):
        start.wait()
        own = []
        for _ in range(requests):
            began = time.perf_counter()
            client.infer([example])
            own.append(time.perf_counter() - began)
        with lock:
            latencies.extend(own)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(connections, examples)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # the warm-up's log lines reach the reader thread before the count starts
    since = len(server.lines)
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    for client in connections:
        client.close()
    time.sleep(0.2)  # the last log lines reach the reader thread
    return latencies, wall, server.forward_sizes(since)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,128px", help=f"run sizes, of {', '.join(SIZES)}")
    parser.add_argument("--ckpt", type=Path, default=None, help="serve this run instead of training the sizes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=40, help="requests per client (tiny); 128px sends a quarter")
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--waits", default="0", help="--max_wait_ms values of the batched servers")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of the server before batching (git worktree add DIR 5b0ca7a), served side by "
                             "side as `before`: what one request's latency was")
    args = parser.parse_args()
    modes = {"one at a time": ("--max_forward_batch", "1")}
    for wait in args.waits.split(","):
        modes[f"batched, wait {wait} ms"] = ("--max_forward_batch", "8", "--max_wait_ms", wait)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_serving_") as tmp:
        sizes = ["given"] if args.ckpt else args.sizes.split(",")
        for size in sizes:
            ckpt = args.ckpt or trained_checkpoint(Path(tmp), size)
            requests = args.requests if size != "128px" else max(4, args.requests // 4)
            servers = {mode: Server(ckpt, args.device, *options) for mode, options in modes.items()}
            if args.before:
                servers["before"] = Server(ckpt, args.device, code=args.before)
            try:
                for clients in map(int, args.clients.split(",")):
                    for mode, server in servers.items():
                        rows.append((size, clients, mode, *measure(server, clients, requests)))
                        print(f"measured {size}, {clients} client(s), {mode}", file=sys.stderr, flush=True)
            finally:
                codes = [server.stop() for server in servers.values()]
            print(f"{size}: server exit statuses after SIGTERM: {codes}", file=sys.stderr)
    load_after = os.getloadavg()
    print(f"\npolicy server, {args.device}, batch-1 requests; load average (1/5/15 min) before "
          f"{'/'.join(f'{x:.1f}' for x in load_before)}, after {'/'.join(f'{x:.1f}' for x in load_after)}, "
          f"{os.cpu_count()} CPUs\n")
    print("| size | clients | server | requests | p50 ms | p99 ms | requests/s | examples/forward | vs one at a time |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = {}
    for size, clients, mode, latencies, wall, forwards in rows:
        rate = len(latencies) / wall
        base.setdefault((size, clients), rate)  # one at a time is measured first
        p50, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 99])
        per_forward = f"{np.mean(forwards):.2f}" if forwards else "-"
        print(f"| {size} | {clients} | {mode} | {len(latencies)} | {p50:.1f} | {p99:.1f} | {rate:.1f} | {per_forward} | "
              f"{rate / base[(size, clients)]:.2f}x |")


if __name__ == "__main__":
    main()
