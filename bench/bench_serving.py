"""Policy server latency and throughput: 1 and 4 concurrent clients against one server process, in one run.

    .venv/bin/python bench/bench_serving.py [--ckpt RUN/checkpoints/steps_N_pytorch_model.pt] [--device cpu]
        [--requests 40] [--clients 1,4]

Without --ckpt a tiny run is trained for two steps by the real trainer in a temporary folder (tiny pipeline and
tiny RoboTwin data generated there). The server runs as its own process (`python -m DiT4DiT.serving.server`,
loopback only, one torch thread on CPU); each client is a thread of this process with its own connection,
sending batch-1 requests back to back. Per setting: latency p50 / p99 (send to reply, as a client sees it) and
requests/s over the wall time of all clients, plus the ratio to one client. The server runs requests one at a
time, so with 4 clients the throughput stays near one client's while each request waits for the others.
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
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # runnable without an installed package; reuses the test trainer

from DiT4DiT.serving.client import PolicyClient  # noqa: E402


def tiny_checkpoint(workdir: Path) -> Path:
    from helpers.fixtures_data import TINY_TASKS
    from test_train_e2e import train

    from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline
    from DiT4DiT.tools.tiny_robotwin import generate

    pipeline = write_tiny_pipeline(workdir / "cosmos" / "Cosmos-Predict2.5-tiny")
    generate(workdir / "data", seed=0, tasks=TINY_TASKS)
    result = train(pipeline, workdir / "data", workdir / "runs", "bench", "--trainer.max_train_steps=2",
                   "--trainer.save_interval=2")
    if result.returncode:
        raise SystemExit(f"training the tiny run failed:\n{result.stderr[-3000:]}")
    return workdir / "runs" / "bench" / "checkpoints" / "steps_2_pytorch_model.pt"


def start_server(ckpt: Path, device: str) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "DiT4DiT.serving.server", "--ckpt", str(ckpt), "--host",
                                "127.0.0.1", "--port", "0", "--device", device],
                               cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            raise SystemExit("the server exited before listening")
        found = re.search(r"on ws://127\.0\.0\.1:(\d+)", line)
        if found:
            # Keep reading its log so that the pipe never fills and blocks the server.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, int(found.group(1))
    raise SystemExit("the server did not start listening within 600 s")


def request_for(metadata: dict) -> dict:
    size, state_dim = int(metadata["image_size"]), int(metadata["state_dim"])
    rng = np.random.default_rng(0)
    example = {"image": [rng.integers(0, 256, (size, 3 * size, 3), dtype=np.uint8)], "lang": "place the bottle"}
    if state_dim:
        example["state"] = rng.uniform(-1, 1, (1, state_dim)).astype(np.float32)
    return example


def measure(port: int, clients: int, requests: int) -> tuple[list[float], float]:
    """Latencies (s) of every request and the wall time, `clients` connections sending `requests` each."""
    connections = [PolicyClient("127.0.0.1", port, wait_s=60) for _ in range(clients)]
    example = request_for(connections[0].metadata)
    for client in connections:  # warm-up: first-request costs (prompt encoding, allocator) stay out
        client.infer([example])
    latencies: list[float] = []
    lock, start = threading.Lock(), threading.Barrier(clients + 1)

    def run(client: PolicyClient):
        start.wait()
        own = []
        for _ in range(requests):
            began = time.perf_counter()
            client.infer([example])
            own.append(time.perf_counter() - began)
        with lock:
            latencies.extend(own)

    threads = [threading.Thread(target=run, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    for client in connections:
        client.close()
    return latencies, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=40, help="requests per client")
    parser.add_argument("--clients", default="1,4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_serving_") as tmp:
        ckpt = args.ckpt or tiny_checkpoint(Path(tmp))
        process, port = start_server(ckpt, args.device)
        try:
            rows = [(c, *measure(port, c, args.requests)) for c in map(int, args.clients.split(","))]
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    base = None
    print(f"\npolicy server, {args.device}, batch-1 requests ({args.requests} per client)\n")
    print("| clients | requests | p50 ms | p99 ms | requests/s | vs 1 client |")
    print("|---|---|---|---|---|---|")
    for clients, latencies, wall in rows:
        rate = len(latencies) / wall
        base = base or rate
        p50, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 99])
        print(f"| {clients} | {len(latencies)} | {p50:.1f} | {p99:.1f} | {rate:.1f} | {rate / base:.2f}x |")
    print(f"\nserver exit status after SIGTERM: {process.returncode}")


if __name__ == "__main__":
    main()
