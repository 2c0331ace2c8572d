"""Closed-loop evaluation throughput over environment processes, and the cost of evaluating during training.

    python bench/bench_parallel_eval.py [--episodes 8] [--num_envs 1,2,4] [--train_steps 60] [--json FILE]

On Meta-World (handle-press-v3, 32-pixel views, the tiny model trained 2 steps on 2 expert demos, so that every
episode fails and runs the whole --max_steps: the rate measures the loop, not the policy), with one policy server
on the CPU in its own process:

1. episodes per hour at each --num_envs, with the CPU-seconds per episode of the simulators and of the server, and
   whether the per-episode table equals --num_envs 1's;
2. the whole LIBERO protocol (4 suites x 10 tasks x 50 trials) at those speed-ups, from the per-episode minutes
   measured on this machine (docs/closed-loop.md: --libero_episode_min);
3. the tiny run trained --train_steps steps without and with trainer.closed_loop_eval (every 10 steps, 2
   episodes, one thread), its samples/s, and the side processes' CPU-seconds (sampled from /proc every 0.5 s) as
   cores over the training loop, against the slow-down they explain: on a host whose run queue holds L
   processes (the load average) sharing the cores fairly, a demand of d cores slows the trainer by (L + d) / L;
   on an idle host, with a single-threaded trainer, by max(1, (1 + d) / cores).

The machine's load average is recorded before and after: on a shared host the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from bench_closed_loop import MODEL_OVERRIDES, ROOT, SIM_PYTHON, TINY_MODEL, free_port, print_report, run

from DiT4DiT.evaluation.metaworld import dataset_name, training_options

TASK = "handle-press-v3"
SIZE = "32"
LIBERO_PROTOCOL = 4 * 10 * 50  # suites x tasks x trials
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a running process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


class SideProcessSampler:
    """CPU-seconds of trainer.closed_loop_eval's side processes (each the leader of a session of its own) and
    everything in their sessions, from /proc every `period_s`; a process's last half second is missed."""

    def __init__(self, period_s: float = 0.5):
        self.period_s, self.seen = period_s, {}  # pid -> (session, cpu seconds, command line)
        self.loads: list[float] = []  # the 1-minute load average at each sample
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.period_s):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                self.seen[int(entry.name)] = int(fields[3]), (int(fields[11]) + int(fields[12])) / TICKS, command
            self.loads.append(os.getloadavg()[0])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def cpu_seconds(self) -> float:
        leaders = {pid for pid, (session, _, command) in self.seen.items()
                   if pid == session and "DiT4DiT.training.closed_loop_eval" in command}
        return sum(cpu for session, cpu, _ in self.seen.values() if session in leaders)


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


def evaluate_at(num_envs: int, port: int, server_pid: int, args, out: Path, env: dict) -> dict:
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_seconds(server_pid)
    wall = run([str(SIM_PYTHON), "-m", "DiT4DiT.evaluation.metaworld", "evaluate", "--server", f"127.0.0.1:{port}",
                "--wait_s", "600",
                "--task", TASK, "--episodes", str(args.episodes), "--max_steps", str(args.max_steps), "--image_size",
                SIZE, "--videos", "0", "--num_envs", str(num_envs), "--out", str(out)], env,
               out.parent / f"evaluate_{num_envs}.log")
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    simulators = (after_children.ru_utime + after_children.ru_stime) - (before_children.ru_utime + before_children.ru_stime)
    summary = json.loads((out / "summary.json").read_text())
    return {"num_envs": num_envs, "wall_s": round(wall, 1), "episodes_per_hour": round(3600 * args.episodes / wall),
            "simulator_cpu_s_per_episode": round(simulators / args.episodes, 2),
            "server_cpu_s_per_episode": round((cpu_seconds(server_pid) - server_before) / args.episodes, 2),
            "requests": summary["latency"]["requests"], "median_request_ms": round(summary["latency"]["median_ms"], 1),
            "outcomes": summary["outcomes"], "lengths": summary["episode_lengths"]}


def train(args, env: dict, work: Path, demos: Path, run_id: str, *options: str) -> dict:
    """Train the tiny run; its mean samples/s after the first logging window, wall time, and CPU-seconds of the
    training and of the side processes."""
    shutil.rmtree(work / "runs" / run_id, ignore_errors=True)
    command = ["bash", "scripts/train_8p.sh", "--device=cpu", *training_options(demos), f"--base_model={TINY_MODEL}",
               f"--run_root_dir={work / 'runs'}", f"--run_id={run_id}",
               f"--max_train_steps={args.train_steps}", "--save_interval=10", "--trainer.logging_frequency=5",
               f"--trainer.eval_interval={args.train_steps}", "--datasets.vla_data.holdout_episodes=0",
               "--datasets.vla_data.num_workers=0", f"--datasets.vla_data.cache_dir={work / 'cache'}",
               "--trackers=[jsonl]", *MODEL_OVERRIDES, *options]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with SideProcessSampler() as sampler:
        wall = run(command, env, work / f"{run_id}.log")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    side = sampler.cpu_seconds()
    # Everything the launcher ran, reaped by it, less the side processes (the trainer reaps them too).
    training = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) - side
    run_dir = work / "runs" / run_id
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["samples_per_s"] for r in records if "samples_per_s" in r][1:]  # the first window holds the warm-up
    samples_per_s = sum(rates) / len(rates)
    batch = int(re.search(r"per_device_batch_size: (\d+)", (run_dir / "config.yaml").read_text()).group(1))
    return {"samples_per_s": round(samples_per_s, 2), "wall_s": round(wall, 1),
            "loop_s": round(args.train_steps * batch / samples_per_s, 1), "training_cpu_s": round(training, 1),
            "side_process_cpu_s": round(side, 1), "mean_load_average": round(sum(sampler.loads) / len(sampler.loads), 1),
            "evaluated_steps": [r["step"] for r in records if "closed_loop_success_rate" in r]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8, help="episodes per --num_envs value")
    parser.add_argument("--max_steps", type=int, default=150)
    parser.add_argument("--num_envs", default="1,2,4", help="comma-separated process counts")
    parser.add_argument("--train_steps", type=int, default=60, help="steps of each training run (0: skip part 3)")
    parser.add_argument("--libero_episode_min", type=float, nargs=2, default=(5.0, 2.3), metavar=("ORIGINAL", "FAST"),
                        help="minutes per libero_spatial episode on this machine, the original's rendering and "
                             "--fast_render (docs/closed-loop.md)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_parallel_eval")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    if not SIM_PYTHON.exists():
        subprocess.check_call(["make", "sim-env"], cwd=ROOT)
    subprocess.check_call(["make", "--no-print-directory", "-o", "venv", f"PY={sys.executable}",
                           str(TINY_MODEL.relative_to(ROOT) / "model_index.json")], cwd=ROOT)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    report = {"cores": len(os.sched_getaffinity(0)), "load_average_before": load_average(), "task": TASK,
              "image_size": int(SIZE), "episodes": args.episodes, "max_steps": args.max_steps}
    data = work / "data"
    run([str(SIM_PYTHON), "-m", "DiT4DiT.evaluation.metaworld", "collect", "--task", TASK, "--episodes", "2", "--out",
         str(data), "--image_size", SIZE, "--overwrite"], env, work / "collect.log")
    demos = data / dataset_name(TASK)
    shutil.rmtree(work / "runs" / "served", ignore_errors=True)  # a fresh run, not a resume of an earlier bench
    run(["bash", "scripts/train_8p.sh", "--device=cpu", *training_options(demos), f"--base_model={TINY_MODEL}",
         f"--run_root_dir={work / 'runs'}", "--run_id=served", "--max_train_steps=2",
         "--save_interval=2", "--trainer.eval_interval=2", "--datasets.vla_data.holdout_episodes=0",
         "--datasets.vla_data.num_workers=0", f"--datasets.vla_data.cache_dir={work / 'cache'}", "--trackers=[jsonl]",
         *MODEL_OVERRIDES], env, work / "train_served.log")

    port = free_port()
    server_log = (work / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "DiT4DiT.serving.server", "--ckpt",
                               str(work / "runs" / "served" / "checkpoints" / "steps_2_pytorch_model.pt"), "--host",
                               "127.0.0.1", "--port", str(port), "--device", "cpu"], cwd=ROOT, env=env,
                              stdout=server_log, stderr=subprocess.STDOUT)
    rows = []
    try:
        for n in (int(part) for part in args.num_envs.split(",")):
            rows.append(evaluate_at(n, port, server.pid, args, work / f"eval_{n}", env))
            print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("outcomes", "lengths")}), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
        server_log.close()
    serial = rows[0]
    serial_table = serial["outcomes"], serial["lengths"]
    for row in rows:
        row["speed_up"] = round(serial["wall_s"] / row["wall_s"], 2)
        row["same_table_as_first"] = (row.pop("outcomes"), row.pop("lengths")) == serial_table
    # CPU-bound ceiling: every core busy with simulators and the server.
    per_episode = serial["simulator_cpu_s_per_episode"] + serial["server_cpu_s_per_episode"]
    report["cpu_bound_episodes_per_hour"] = round(3600 * report["cores"] / per_episode) if per_episode else None
    report["rows"] = rows
    original, fast = args.libero_episode_min
    report["libero_protocol_hours"] = {
        f"num_envs {row['num_envs']}": {"original_rendering": round(LIBERO_PROTOCOL * original / 60 / row["speed_up"], 1),
                                        "fast_render": round(LIBERO_PROTOCOL * fast / 60 / row["speed_up"], 1)}
        for row in rows}
    if args.train_steps:
        plain = train(args, env, work, demos, "plain")
        with_eval = train(args, env, work, demos, "with_eval", "--trainer.closed_loop_eval.interval=10",
                          f"--trainer.closed_loop_eval.task={TASK}", "--trainer.closed_loop_eval.episodes=2",
                          f"--trainer.closed_loop_eval.max_steps={args.max_steps}",
                          f"--trainer.closed_loop_eval.evaluate_options=--image_size {SIZE}",
                          "--trainer.closed_loop_eval.at_end=cancel", "--trainer.closed_loop_eval.threads=1")
        # The side process's demand in cores over the training loop; on a host whose run queue holds `load`
        # processes sharing the cores fairly, it slows the trainer by (load + demand) / load.
        demand = with_eval["side_process_cpu_s"] / with_eval["loop_s"]
        load = plain["mean_load_average"]
        report["training"] = {
            "without": plain, "with_closed_loop_eval": with_eval,
            "slow_down": round(plain["samples_per_s"] / with_eval["samples_per_s"], 2),
            "side_process_cores": round(demand, 2),
            "side_process_cpu_share": round(demand / report["cores"], 2),
            "slow_down_the_share_explains": round((load + demand) / load if load >= report["cores"]
                                                  else max(1.0, (1 + demand) / report["cores"]), 2),
        }
    report["load_average_after"] = load_average()
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
