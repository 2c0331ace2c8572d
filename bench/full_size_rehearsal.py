"""Full-size rehearsal on a CPU: the real job at the real width, batch 1, through the real entry points.

    python bench/full_size_rehearsal.py [--snapshot DIR] [--workdir DIR] [--min_available_gib 16]
        [--original PATH [--original_python PY] [--rounds 3] [--compare_only]]
    make rehearsal [ORIGINAL=PATH ORIGINAL_PYTHON=PY] [REHEARSAL_ARGS=...]

Each phase is its own process, as users run it; its wall time and peak RSS (wait4's ru_maxrss: the process and
the children it waited for) go into the table, with the memory estimate for the same run next to the training
phases' peaks:
  snapshot       python -m DiT4DiT.tools.full_size_cosmos (skipped when --snapshot holds a complete one)
  doctor         python -m DiT4DiT.doctor, robotwin config, 16 processes of an A3 node (fake npu-smi)
  preflight      python -m DiT4DiT.launch --dry-run, the same job: its memory plan and preflight
  train          accelerate launch of DiT4DiT/training/train.py: robotwin config (3 views of 224 px, 8 frames,
                 joint mode) at batch 1 for 2 steps, a training state saved after each; the prompt store is written
                 at its real size (512 x 28 x 3584 bf16 per instruction)
  resume         step 2's state moved aside, --trainer.is_resume true: continues from step 1; step 2's losses must
                 equal the uninterrupted run's
  checkpointing  1 step with --trainer.enable_gradient_checkpointing=true
  serve          python -m DiT4DiT.serving.server on the run's final weights, answering one request
  compare        with --original PATH (a checkout of the original DiT4DiT, never vendored): bench/step_timing.py
                 writes the config and one batch, then --rounds rounds of two processes, ours then the original's
                 (its checkout first on sys.path, ours off it), each loading the snapshot with the same config
                 keys and frozen set and timing 2 steps (forward, backward, clipping, AdamW) on that batch; the
                 table holds the second step's time and each process's peak RSS, and their ratios; then how far
                 apart the two action heads sample on the same input
To fit 24 GB the text encoder, the VAE and the transformer's blocks are frozen (the 2B optimizer state would need
~33 GB); the patch embedding before block 0, the text projection, the output layer and the action head train, so
the video loss's backward still passes through all 28 blocks. Heavy phases wait until MemAvailable reaches
--min_available_gib (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from DiT4DiT import cosmos_2b  # noqa: E402
from DiT4DiT.memory_estimate import GIB  # noqa: E402

ROBOTWIN = "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"
FROZEN = ("backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae,"
          "backbone_interface.extractor.transformer.transformer_blocks")
FULL_SNAPSHOT = REPO / "playground/Pretrained_models/Cosmos-Predict2.5-2B-random"
FAKE_BIN = REPO / "tests" / "fakes" / "bin"
HEAVY = ("snapshot", "train", "resume", "checkpointing", "serve")


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def wait_for_memory(need_gib: float, phase: str, patience_s: int = 1800) -> None:
    deadline = time.monotonic() + patience_s
    while available_gib() < need_gib:
        if time.monotonic() > deadline:
            raise SystemExit(f"{phase}: MemAvailable stayed below {need_gib} GiB for {patience_s} s; try later")
        print(f"{phase}: waiting for {need_gib} GiB available (now {available_gib():.1f})", flush=True)
        time.sleep(30)


def run_phase(name: str, command: list[str], log: Path, env: dict | None = None, without: tuple[str, ...] = ()) -> dict:
    """Run `command`, its output to `log`, in this environment plus `env` less the variables `without`; wall time,
    peak RSS (GiB) and exit status."""
    start = time.monotonic()
    environment = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in without}
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=out,
                                   stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    print(f"{name}: exit {process.returncode}, {wall:.0f} s, peak RSS {usage.ru_maxrss / 2**20:.2f} GiB ({log})",
          flush=True)
    return {"phase": name, "wall_s": wall, "peak_rss_gib": usage.ru_maxrss / 2**20, "exit": process.returncode,
            "log": str(log)}


def run_original_check(checkout: Path, python: str) -> None:
    """A missing or incompatible original ends the run before anything heavy, with its one line and exit 2."""
    try:
        check = subprocess.run([python, str(REPO / "bench" / "step_timing.py"), "original", "--checkout",
                                str(checkout), "--check"], cwd=REPO, capture_output=True, text=True,
                               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    except OSError as error:
        print(f"--original {checkout}: --original_python {python} does not run: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if check.returncode != 0 or "imports" not in check.stdout:
        lines = (check.stderr or check.stdout).strip().splitlines()
        print(lines[-1] if lines else f"--original {checkout}: {python} exited {check.returncode}", file=sys.stderr)
        raise SystemExit(2)


def compare(args, snapshot: Path, data: Path, work: Path, keys: list[str], env: dict) -> list[dict]:
    """--rounds rounds of ours then the original's step-timing process on one prepared batch; each result's JSON."""
    folder = work / "compare"
    step_timing = str(REPO / "bench" / "step_timing.py")
    wait_for_memory(args.min_available_gib, "compare")
    prepared = run_phase("compare: prepare", [sys.executable, step_timing, "prepare", "--config_yaml", ROBOTWIN,
                                              "--out", str(folder), *training_overrides(snapshot, data, work), *keys],
                         work / "compare_prepare.log", env)
    if prepared["exit"] != 0:
        raise SystemExit(f"compare: preparing the batch failed; see {prepared['log']}")
    results = []
    for round_ in range(1, args.rounds + 1):
        for side, python, extra in (("ours", sys.executable, []),
                                    ("original", args.original_python, ["--checkout", str(args.original)])):
            wait_for_memory(args.min_available_gib, f"compare {side}")
            out = folder / f"round{round_}_{side}.json"
            out.unlink(missing_ok=True)  # a failed process leaves none: never an earlier run's
            row = run_phase(f"compare: round {round_} {side}",
                            [python, step_timing, side, "--work", str(folder), "--result", str(out), *extra],
                            work / f"compare_round{round_}_{side}.log", env,
                            without=("PYTHONPATH",) if side == "original" else ())
            results.append({"round": round_, "side": side, "exit": row["exit"], "log": row["log"],
                            **(json.loads(out.read_text()) if out.is_file() else {})})
    return results


def round_line(result: dict) -> str:
    """One timing process's second step: its split, losses and what it trained (or where its log is)."""
    if "steps" not in result:
        return f"round {result['round']} {result['side']}: exit {result['exit']}, see {result['log']}"
    last = result["steps"][-1]
    return (f"round {result['round']} {result['side']}: step 2 forward {last['forward_s']:.2f} s, backward "
            f"{last['backward_s']:.2f} s, AdamW {last['optimizer_s']:.2f} s; losses "
            + ", ".join(f"{k} {v:.4f}" for k, v in last.items() if k.endswith("loss"))
            + f"; {result['trainable_parameters']:,} trained parameters in {result['trainable_tensors']} "
              f"tensors (names {result['trainable_names_sha256'][:12]})")


def head_agreement(results: list[dict]) -> str:
    """How far apart ours and the original's action heads sample, for the same weights, features and seed."""
    first = {r["side"]: r.get("head_prediction") for r in results if r["round"] == 1}
    if first.get("ours") is None or first.get("original") is None:
        return "action head: no prediction from both sides to compare"
    gap = float(np.abs(np.array(first["ours"]) - np.array(first["original"])).max())
    return (f"action head, same weights, seeded features and noise, float32: max |ours - original| = {gap:.2e} "
            f"over actions of up to {float(np.abs(np.array(first['ours'])).max()):.2f}")


def comparison_table(results: list[dict]) -> str:
    """Per round and as medians: the second step's seconds and the peak RSS of ours and the original's, and
    ours / original."""
    def figure(result: dict | None, key: str) -> float | None:
        if not result or result["exit"] != 0 or "steps" not in result:
            return None
        return result["steps"][-1]["step_s"] if key == "step_s" else result[key]

    def cell(value: float | None) -> str:
        return "failed" if value is None else f"{value:.2f}"

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}" if a is not None and b else "-"

    lines = ["| round | ours s/step | original s/step | ours / original | ours peak RSS GiB | original peak RSS GiB "
             "| ours / original |", "|---|---|---|---|---|---|---|"]
    columns: dict[str, list[float]] = {}
    for round_ in sorted({r["round"] for r in results}):
        pair = {r["side"]: r for r in results if r["round"] == round_}
        values = [figure(pair.get(side), key) for key in ("step_s", "peak_rss_gib") for side in ("ours", "original")]
        for name, value in zip(("ours_s", "original_s", "ours_rss", "original_rss"), values):
            if value is not None:
                columns.setdefault(name, []).append(value)
        ours_s, original_s, ours_rss, original_rss = values
        lines.append(f"| {round_} | {cell(ours_s)} | {cell(original_s)} | {ratio(ours_s, original_s)} | "
                     f"{cell(ours_rss)} | {cell(original_rss)} | {ratio(ours_rss, original_rss)} |")
    medians = [statistics.median(columns[name]) if columns.get(name) else None
               for name in ("ours_s", "original_s", "ours_rss", "original_rss")]
    lines.append(f"| median | {cell(medians[0])} | {cell(medians[1])} | {ratio(medians[0], medians[1])} | "
                 f"{cell(medians[2])} | {cell(medians[3])} | {ratio(medians[2], medians[3])} |")
    return "\n".join(lines)


def trainer_args(snapshot: Path, data: Path, work: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "DiT4DiT/config/deepseeds/cpu.yaml",
            "--num_processes", "1", "DiT4DiT/training/train.py", "--config_yaml", ROBOTWIN,
            *training_overrides(snapshot, data, work), *extra]


# --smoke: the test-size snapshot (4 blocks of width 32) with the robotwin config's backbone keys fitted to it.
SMOKE_KEYS = ["--framework.cosmos25.extract_layer=2", "--framework.cosmos25.vl_hidden_dim=32",
              "--framework.action_model.diffusion_model_cfg.cross_attention_dim=32"]


def training_overrides(snapshot: Path, data: Path, work: Path) -> list[str]:
    return [f"--framework.cosmos25.base_model={snapshot}", f"--datasets.vla_data.data_root_dir={data}",
            f"--run_root_dir={work / 'runs'}", "--run_id=rehearsal", "--trackers=[jsonl]",
            f"--datasets.vla_data.cache_dir={work / 'cache'}", "--datasets.vla_data.num_workers=0",
            "--datasets.vla_data.per_device_batch_size=1", "--trainer.max_train_steps=2",
            "--trainer.save_interval=1", "--trainer.logging_frequency=1", f"--trainer.freeze_modules={FROZEN}",
            # The run measures its peak against the estimate; the start-up check would compare the same estimate
            # with a shared machine's momentary MemAvailable.
            "--trainer.ignore_resource_check=true"]


def estimate_gib(snapshot: Path, data: Path, work: Path, *extra: str) -> float:
    """The memory estimate for the rehearsal's own run: one CPU process, no DeepSpeed."""
    from DiT4DiT.config.schema import load_config, normalize_cli_overrides
    from DiT4DiT.config.sections import ConfigSections
    from DiT4DiT.config.typed import section
    from DiT4DiT.memory_estimate import estimate_training_memory

    overrides = normalize_cli_overrides([*training_overrides(snapshot, data, work), *extra])
    typed = section(load_config(str(REPO / ROBOTWIN), overrides), ConfigSections)
    return estimate_training_memory(snapshot, typed.framework, typed.trainer, typed.datasets.vla_data, 1, 3,
                                    zero_stage=0, device_kind="cpu").total_gib


def step_losses(metrics: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return {r["step"]: {k: r[k] for k in ("action_loss", "future_video_loss", "total_loss")} for r in rows
            if "total_loss" in r}


def serve_once(final: Path, log: Path) -> dict:
    """The server on the run's final weights, one request from a client, then SIGTERM."""
    code = (
        "import sys, time\n"
        "sys.path[:0] = [%r, %r]\n"
        "import bench_serving\n"
        "from DiT4DiT.serving.client import PolicyClient\n"
        "server = bench_serving.Server(%r, 'cpu')\n"
        "client = PolicyClient('127.0.0.1', server.port, wait_s=1800)\n"
        "started = time.monotonic(); reply = client.infer([bench_serving.request_for(client.metadata, 0)])\n"
        "print('request answered in %%.1f s:' %% (time.monotonic() - started), {k: getattr(v, 'shape', v) for k, v in reply.items()})\n"
        "client.close(); print('server exit', server.stop())\n"
    ) % (str(REPO), str(REPO / "bench"), str(final))
    return run_phase("serve", [sys.executable, "-c", code], log)


def rehearse(args, data: Path, work: Path, keys: list[str], env: dict, rows: list[dict]) -> None:
    """The phases from the doctor to the server, and their table."""
    fake_a3 = {"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}", "FAKE_NPU_SMI_LAYOUT": "a3",
               "FAKE_NPU_SMI_IDLE": "1"}
    job = ["--config_yaml", ROBOTWIN, "--base_model", str(args.snapshot), "--num_processes", "16"]
    # The doctor and the launcher check the job as configured; with --smoke its keys do not fit the small snapshot.
    rows.append(run_phase("doctor", [sys.executable, "-m", "DiT4DiT.doctor", *job], work / "doctor.log",
                          {**env, **fake_a3}))
    rows.append(run_phase("preflight", [sys.executable, "-m", "DiT4DiT.launch", "--dry-run", "--device=npu",
                                        f"--config_yaml={ROBOTWIN}", f"--base_model={args.snapshot}",
                                        f"--data_root_dir={data}", "--num_processes=16"],
                          work / "preflight.log", {**env, **fake_a3}))

    run_dir = work / "runs" / "rehearsal"
    wait_for_memory(args.min_available_gib, "train")
    train = run_phase("train", trainer_args(args.snapshot, data, work, *keys), work / "train.log", env)
    train["estimate_gib"] = estimate_gib(args.snapshot, data, work, *keys)
    rows.append(train)
    uninterrupted = step_losses(run_dir / "metrics.jsonl") if train["exit"] == 0 else {}
    store = sorted((work / "cache").rglob("prompt_embeddings/**/*.safetensors"))
    aside = work / "aside"
    if train["exit"] == 0:
        aside.mkdir(exist_ok=True)
        for name in ("checkpoints/steps_2_training_state", "checkpoints/steps_2_pytorch_model.pt", "final_model"):
            shutil.move(str(run_dir / name), str(aside / Path(name).name))
        wait_for_memory(args.min_available_gib, "resume")
        resume = run_phase("resume", trainer_args(args.snapshot, data, work, *keys, "--trainer.is_resume=true"),
                           work / "resume.log", env)
        resume["estimate_gib"] = train["estimate_gib"]
        resumed = step_losses(run_dir / "metrics.jsonl") if resume["exit"] == 0 else {}
        resume["result"] = ("step 2 losses equal" if resumed.get(2) == uninterrupted.get(2) and 2 in resumed
                            else f"step 2 differs: {uninterrupted.get(2)} vs {resumed.get(2)}")
        rows.append(resume)
        if not (run_dir / "final_model").is_dir():  # the resume failed: serve the uninterrupted run's weights
            shutil.move(str(aside / "final_model"), str(run_dir / "final_model"))
    checkpointing = ("--trainer.enable_gradient_checkpointing=true", "--trainer.max_train_steps=1",
                     "--run_id=rehearsal_checkpointing")
    wait_for_memory(args.min_available_gib, "checkpointing")
    ckpt = run_phase("checkpointing", trainer_args(args.snapshot, data, work, *keys, *checkpointing),
                     work / "checkpointing.log", env)
    ckpt["estimate_gib"] = estimate_gib(args.snapshot, data, work, *keys, *checkpointing)
    rows.append(ckpt)
    final = run_dir / "final_model" / "pytorch_model.pt"
    if final.is_file():  # the server reads the run folder around it: config.yaml, dataset statistics
        wait_for_memory(args.min_available_gib / 2, "serve")
        rows.append(serve_once(final, work / "serve.log"))

    print(f"\nfull-size rehearsal, {os.cpu_count()} CPU cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB RAM, "
          f"snapshot {args.snapshot}\n")
    print("| phase | exit | wall s | peak RSS GiB | estimate GiB | peak / estimate | note |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        est = row.get("estimate_gib")
        ratio = f"{row['peak_rss_gib'] / est:.2f}" if est else "-"
        print(f"| {row['phase']} | {row['exit']} | {row['wall_s']:.0f} | {row['peak_rss_gib']:.2f} | "
              f"{f'{est:.2f}' if est else '-'} | {ratio} | {row.get('result', '')} |")
    if uninterrupted:
        print(f"\nlosses (uninterrupted): {uninterrupted}")
    print(f"prompt store: {len(store)} embedding file(s), {sum(p.stat().st_size for p in store) / 2**20:.0f} MiB "
          f"(one embedding: {cosmos_2b.prompt_embedding_bytes() / 2**20:.0f} MiB)")
    for log, marker in (("doctor.log", "device_memory"), ("preflight.log", "memory:")):
        text = (work / log).read_text().splitlines()
        start = next((i for i, line in enumerate(text) if marker in line), None)
        if start is not None:
            print(f"{log.split('.')[0]}: " + "\n  ".join(line.strip() for line in text[start:start + 6]
                                                         if line.startswith((" ", marker, "PASS", "FAIL", "SKIP"))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot", type=Path, default=None,
                        help="the full-size snapshot, written there when absent (default: " + str(FULL_SNAPSHOT) +
                             "; with --smoke: <workdir>/snapshot_test)")
    parser.add_argument("--workdir", type=Path, default=None, help="runs, data and logs (default: a temporary folder)")
    parser.add_argument("--min_available_gib", type=float, default=16.0,
                        help="MemAvailable a heavy phase waits for (default 16)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--smoke", action="store_true",
                        help="check this script in minutes: a test-size snapshot (python -m DiT4DiT.tools.full_size_cosmos "
                             "--size test) instead of the full one")
    parser.add_argument("--original", type=Path, default=None,
                        help="a checkout of the original DiT4DiT: also time its steps against ours (the compare phase)")
    parser.add_argument("--original_python", default=sys.executable,
                        help="the interpreter for the original's processes (an environment with what it imports)")
    parser.add_argument("--rounds", type=int, default=3, help="compare: rounds of ours then the original's (default 3)")
    parser.add_argument("--compare_only", action="store_true", help="with --original: only the compare phase")
    args = parser.parse_args()
    if args.compare_only and args.original is None:
        parser.error("--compare_only needs --original PATH")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    if args.original is not None:
        args.original = args.original.resolve()
        run_original_check(args.original, args.original_python)
    keys = SMOKE_KEYS if args.smoke else []
    work = args.workdir or Path(tempfile.mkdtemp(prefix="full_size_rehearsal_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.snapshot is None:
        args.snapshot = work / "snapshot_test" if args.smoke else FULL_SNAPSHOT
    env = {"PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "OMP_NUM_THREADS": str(os.cpu_count() or 1),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    rows = []
    from DiT4DiT.pipeline_folder import pipeline_folder_problems

    if pipeline_folder_problems(args.snapshot):
        wait_for_memory(args.min_available_gib / 2, "snapshot")
        size = ["--size", "test"] if args.smoke else []
        rows.append(run_phase("snapshot", [sys.executable, "-m", "DiT4DiT.tools.full_size_cosmos", "--out",
                                           str(args.snapshot), "--overwrite", *size], work / "snapshot.log", env))
    data = work / "data"
    if not data.is_dir():
        subprocess.run([sys.executable, "-m", "DiT4DiT.tools.tiny_robotwin", "--out", str(data)], cwd=REPO,
                       env={**os.environ, **env}, check=True, capture_output=True)
    if not args.compare_only:
        rehearse(args, data, work, keys, env, rows)
    if args.original is not None:
        results = compare(args, args.snapshot, data, work, keys, env)
        print(f"\nours against the original ({args.original}), batch 1, second of 2 steps, {os.cpu_count()} CPU cores, "
              f"snapshot {args.snapshot}\n")
        print(comparison_table(results))
        for result in results:
            print(round_line(result))
        print(head_agreement(results))
    print(f"logs: {work}")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
