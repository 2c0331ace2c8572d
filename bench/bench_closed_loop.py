"""Closed loop on Meta-World: expert demos -> the tiny model trained through the launcher -> success rate.

    python bench/bench_closed_loop.py --task handle-press-v3 [--demos 50] [--steps 500] [--episodes 50] [--json FILE]
    python bench/bench_closed_loop.py --task reach-v3 --cameras across,topview --goal_marker 0.04 ...
    python bench/bench_closed_loop.py --task reach-v3 ... --hand_start 0.1 --goal_set 4
    python bench/bench_closed_loop.py --task handle-press-v3 --steps 350 --executions sync,async,rtc --delays 0,2,4

Collects demonstrations (seeds 0..), trains the tiny config on them for a fixed number of steps with
`scripts/train_8p.sh`, serves the last checkpoint, and evaluates `--episodes` configurations it never saw
(seeds 1000..) with the cameras, with the images blanked, and with the zero and random policies; or, with
--executions, the trained policy in each execution mode at each simulated --delays value (chunk seams included).
Every process
gets OMP_NUM_THREADS (default: cores / 2, the trainer and the simulator share the machine). The simulator runs in
.venv-metaworld (`make sim-env`, built on first use), the trainer and server in the Python running this script.
Prints and writes (--json) success rates with 95% intervals, steps, and wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from DiT4DiT.evaluation.metaworld import add_scene_options, dataset_name, training_options

ROOT = Path(__file__).resolve().parents[1]
SIM_PYTHON = ROOT / ".venv-metaworld" / "bin" / "python"
TINY_MODEL = ROOT / "playground/Pretrained_models/Cosmos-Predict2.5-tiny"
# The libero_franka layout of `collect`: 8 state keys, sin/cos-encoded to 16; 7 action dims.
MODEL_OVERRIDES = ("--framework.action_model.state_dim=16", "--framework.action_model.action_dim=7",
                   "--datasets.vla_data.max_state_dim=16", "--datasets.vla_data.max_action_dim=7")


def run(command: list[str], env: dict, log: Path) -> float:
    """Run to completion with output to `log`; its wall time, or exit with the log's tail on failure."""
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.call(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code:
        sys.exit(f"bench_closed_loop: {' '.join(map(str, command[:4]))} ... failed ({code}); see {log}:\n"
                 + "\n".join(log.read_text().splitlines()[-15:]))
    return time.monotonic() - started


def print_report(report: dict, path: Path | None) -> None:
    """The bench's JSON on stdout, and in `path` when given."""
    text = json.dumps(report, indent=2)
    print(text)
    if path:
        path.write_text(text + "\n")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--demos", type=int, default=50)
    parser.add_argument("--steps", type=int, default=500, help="training steps (the fixed budget)")
    parser.add_argument("--batch", type=int, default=8, help="per-device batch size")
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes per policy")
    parser.add_argument("--max_steps", type=int, default=150, help="env steps before an episode fails")
    parser.add_argument("--model_image_size", type=int, default=32,
                        help="the model's frame side (datasets.vla_data.image_size; the tiny config's 32 by default)")
    add_scene_options(parser)  # collect's and evaluate's own, passed on to both
    parser.add_argument("--threads", type=int, default=max(1, len(os.sched_getaffinity(0)) // 2),
                        help="OMP_NUM_THREADS of each process")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_closed_loop",
                        help="folder for the demos, the run, the evaluations and logs")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--executions", default=None,
                        help="comma list of sync, async, rtc: evaluate the trained policy in each mode at each of "
                             "--delays (the evaluator's --execution and --inference_delay) instead of the trained, "
                             "blank-image and baseline set")
    parser.add_argument("--delays", default="0", help="comma list of simulated inference delays, in policy steps")
    parser.add_argument("--train_option", action="append", default=[], metavar="OPTION",
                        help="one more launcher option for training, e.g. "
                             "--train_option=--datasets.vla_data.video_delta_indices=[0] (repeatable)")
    args = parser.parse_args()

    if not SIM_PYTHON.exists():
        subprocess.check_call(["make", "sim-env"], cwd=ROOT)
    # Through make's rule, which also rewrites a snapshot older than the tool that writes it; with this Python and
    # without the rule's .venv prerequisite, so a run from another environment does not build one.
    subprocess.check_call(["make", "--no-print-directory", "-o", "venv", f"PY={sys.executable}",
                           str(TINY_MODEL.relative_to(ROOT) / "model_index.json")], cwd=ROOT)
    work = args.work / args.task
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(args.threads), WANDB_MODE="offline",
               HF_HUB_OFFLINE="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    metaworld = [str(SIM_PYTHON), "-m", "DiT4DiT.evaluation.metaworld"]
    cameras = ",".join(args.cameras)
    views = ["--image_size", str(args.image_size), "--cameras", cameras, "--goal_marker", str(args.goal_marker),
             "--hand_start", str(args.hand_start), "--goal_set", str(args.goal_set)]
    started = time.monotonic()

    collect_s = run([*metaworld, "collect", "--task", args.task, "--episodes", str(args.demos), "--out",
                     str(work / "data"), *views, "--overwrite"], env, work / "collect.log")
    run_id = f"{args.task}_{args.demos}demos_{args.steps}steps"
    shutil.rmtree(work / "runs" / run_id, ignore_errors=True)  # a fresh run, not a resume of an earlier bench
    demos = work / "data" / dataset_name(args.task)
    train_s = run(["bash", "scripts/train_8p.sh", "--device=cpu", *training_options(demos),
                   f"--base_model={TINY_MODEL}", f"--run_root_dir={work / 'runs'}",
                   f"--run_id={run_id}", f"--max_train_steps={args.steps}", f"--save_interval={args.steps}",
                   f"--per_device_batch_size={args.batch}", f"--trainer.eval_interval={args.steps}",
                   f"--datasets.vla_data.cache_dir={work / 'cache'}", "--datasets.vla_data.num_workers=0",
                   f"--datasets.vla_data.image_size={args.model_image_size}", "--trackers=[jsonl]", *MODEL_OVERRIDES,
                   *args.train_option],
                  env, work / "train.log")
    ckpt = work / "runs" / run_id / "checkpoints" / f"steps_{args.steps}_pytorch_model.pt"

    port = free_port()
    server_log = (work / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "DiT4DiT.serving.server", "--ckpt", str(ckpt), "--host",
                               "127.0.0.1", "--port", str(port), "--device", "cpu"], cwd=ROOT, env=env,
                              stdout=server_log, stderr=subprocess.STDOUT)
    results, evaluate_s = {}, {}
    served = ["--server", f"127.0.0.1:{port}", "--wait_s", "300"]
    policies = {"trained": served, "blank_images": [*served, "--blank_images"],
                "zero": ["--policy", "zero"], "random": ["--policy", "random"]}
    if args.executions:
        policies = {f"{mode}_delay{delay}": [*served, "--execution", mode, "--inference_delay", delay]
                    for delay in args.delays.split(",") for mode in args.executions.split(",")}
    try:
        for name, options in policies.items():
            out = work / "eval" / name
            evaluate_s[name] = run([*metaworld, "evaluate", "--task", args.task, "--episodes", str(args.episodes),
                                    "--max_steps", str(args.max_steps), *views, "--out", str(out), *options],
                                   env, work / f"eval_{name}.log")
            results[name] = json.loads((out / "summary.json").read_text())
    finally:
        server.terminate()
        server.wait(timeout=60)
        server_log.close()

    trained = results[next(iter(policies))]
    report = {
        "task": args.task, "demos": args.demos, "steps": args.steps, "per_device_batch_size": args.batch,
        "episodes": args.episodes, "max_steps": args.max_steps, "omp_num_threads": args.threads,
        "cameras": cameras, "goal_marker": args.goal_marker, "hand_start": args.hand_start,
        "goal_set": args.goal_set, "model_image_size": args.model_image_size, "train_options": args.train_option,
        "success_rate": trained["success_rate"], "ci95": trained["ci95"],
        "baselines": {name: {"success_rate": results[name]["success_rate"], "ci95": results[name]["ci95"]}
                      for name in ("blank_images", "zero", "random") if name in results},
        "executions": {name: {key: results[name][key] for key in ("execution", "inference_delay", "success_rate",
                                                                  "ci95", "mean_length", "seams", "seam_jump_mean",
                                                                  "seam_jump_max", "step_change_mean")}
                       for name in results if args.executions},
        "mean_length": trained["mean_length"], "latency": trained["latency"],
        "episodes_per_min": trained["episodes_per_min"],
        "wall_s": {"collect": round(collect_s, 1), "train": round(train_s, 1),
                   **{f"evaluate_{k}": round(v, 1) for k, v in evaluate_s.items()},
                   "total": round(time.monotonic() - started, 1)},
        "command": " ".join(["python bench/bench_closed_loop.py", *sys.argv[1:]]),
        "run_dir": str(work / "runs" / run_id),
    }
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
