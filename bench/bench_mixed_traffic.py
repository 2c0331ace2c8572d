"""Mixed traffic against a policy server process, bigger than the test's: bench/mixed_traffic.py at several seeds.

    .venv/bin/python bench/bench_mixed_traffic.py [--ckpt RUN/checkpoints/steps_N_pytorch_model.pt] [--seeds 0,1,2]
        [--clients 32] [--requests 20] [--max_wait_ms 5] [--json FILE]

Without --ckpt a tiny run is trained for two steps in a temporary folder (bench/bench_serving.py's). One server
process (`python -m DiT4DiT.serving.server`, loopback, one torch thread on CPU) takes every seed's traffic in turn;
per seed: the requests of each kind, the shapes of the well-formed ones, the largest difference of a well-formed
request's actions from its run alone, the rules broken (none expected), the wall time, and the server's /healthz
afterwards. Exits 1 if a rule broke or the server stopped answering.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # runnable without an installed package

from bench_serving import Server, trained_checkpoint  # noqa: E402

from bench import mixed_traffic  # noqa: E402


def health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, default=None, help="serve this run instead of training a tiny one")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated generator seeds, run in turn")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (at most the server's --max_queue)")
    parser.add_argument("--requests", type=int, default=20, help="requests per client")
    parser.add_argument("--max_wait_ms", default="5", help="the server's --max_wait_ms")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.ckpt or trained_checkpoint(Path(tmp), "tiny")
        server = Server(ckpt, args.device, "--max_wait_ms", args.max_wait_ms)
        rows = []
        try:
            meta = mixed_traffic.metadata(server.port)
            for seed in (int(s) for s in args.seeds.split(",")):
                began = time.perf_counter()
                planned = mixed_traffic.plan(seed, args.clients, args.requests, meta)
                outcome = mixed_traffic.check(server.port, planned, mixed_traffic.send(server.port, planned))
                rows.append({"seed": seed, "clients": args.clients, "requests": args.clients * args.requests,
                             "kinds": dict(outcome.counts), "shapes": len(outcome.shapes),
                             "largest_difference": outcome.largest_difference, "problems": outcome.problems,
                             "wall_s": round(time.perf_counter() - began, 1), "healthz": health(server.port)})
        finally:
            stopped = server.stop()
    print("| seed | clients | requests | good / malformed / NaN / dropped | shapes | largest difference | rules broken "
          "| wall s | /healthz after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        kinds = " / ".join(str(row["kinds"].get(kind, 0)) for kind in mixed_traffic.KINDS)
        print(f"| {row['seed']} | {row['clients']} | {row['requests']} | {kinds} | {row['shapes']} | "
              f"{row['largest_difference']:.1e} | {len(row['problems'])} | {row['wall_s']} | {row['healthz']} |")
        for problem in row["problems"][:10]:
            print(f"  {problem}")
    print(f"server exit status after SIGTERM: {stopped}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "server_exit": stopped}, indent=2))
    return 0 if stopped == 0 and all(not r["problems"] and r["healthz"] == 200 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
