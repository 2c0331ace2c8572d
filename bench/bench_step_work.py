"""Step time and peak memory with the latent store on and off against the original's step, interleaved.

    MALLOC_MMAP_THRESHOLD_=65536 python bench/bench_step_work.py --size large|full --original PATH \
        --original_python PY [--rounds 2] [--workdir DIR] [--snapshot DIR]

One batch of the robotwin config (3 views of 224 px, 8 frames, joint mode, batch 1; the rehearsal's frozen set:
text encoder, VAE and the transformer's blocks) is prepared once by bench/step_timing.py, then each round runs three
processes in turn, each loading the snapshot and timing 2 steps (forward, backward, clipping, AdamW) on it:
  ours           decodes nothing (the batch holds frames) and encodes the clip with the VAE, as without the store
  ours (store)   the same examples as the latent store serves them (framework.cosmos25.latent_cache): no VAE
  original       the original DiT4DiT from its checkout, which encodes every step (and its text prompt)
The tables hold the second step's wall seconds, then its CPU seconds (every thread's: the step's work, which the
machine's other jobs and page faults change less), each process's peak RSS, and each of ours over the original's.
Sizes: `full` is the 2B snapshot (/work/assets or --snapshot); `large` writes bench_model's --deep transformer (12
blocks of 1024) with the real VAE and prompt width (python -m DiT4DiT.tools.full_size_cosmos --size large).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from full_size_rehearsal import (CONFIGS, FULL_SNAPSHOT, round_line, run_original_check, run_phase,  # noqa: E402
                                 training_overrides, wait_for_memory)

SIDES = ("ours", "ours (store)", "original")
LARGE_KEYS = ["--framework.cosmos25.extract_layer=7", "--framework.cosmos25.vl_hidden_dim=1024",
              "--framework.action_model.diffusion_model_cfg.cross_attention_dim=1024"]


def rounds(args, snapshot: Path, data: Path, work: Path, keys: list[str], env: dict) -> list[dict]:
    import json

    step_timing = str(REPO / "bench" / "step_timing.py")
    folder = work / "prepared"
    wait_for_memory(args.min_available_gib, "prepare")
    prepared = run_phase("prepare", [sys.executable, step_timing, "prepare", "--config_yaml", CONFIGS["robotwin"],
                                     "--out", str(folder), *training_overrides("robotwin", snapshot, data, work),
                                     *keys],
                         work / "prepare.log", env)
    if prepared["exit"] != 0:
        raise SystemExit(f"preparing the batch failed; see {prepared['log']}")
    results = []
    for round_ in range(1, args.rounds + 1):
        for side in SIDES:
            extra = {"ours": ["ours"], "ours (store)": ["ours", "--latents"],
                     "original": ["original", "--checkout", str(args.original)]}[side]
            python = args.original_python if side == "original" else sys.executable
            name = {"ours": "ours", "ours (store)": "ours_store", "original": "original"}[side]
            out = work / f"round{round_}_{name}.json"
            out.unlink(missing_ok=True)
            wait_for_memory(args.min_available_gib, f"round {round_} {side}")
            row = run_phase(f"round {round_} {side}", [python, step_timing, *extra, "--work", str(folder),
                                                      "--result", str(out)],
                            work / f"round{round_}_{name}.log", env,
                            without=("PYTHONPATH",) if side == "original" else ())
            results.append({**(json.loads(out.read_text()) if out.is_file() else {}), "round": round_, "side": side,
                            "exit": row["exit"], "log": row["log"]})
    return results


def table(results: list[dict], key: str = "step_s", unit: str = "s/step") -> str:
    """Per round, the second step's `key` of each side and each of ours over the original's, then the medians."""
    def figure(result: dict | None, name: str) -> float | None:
        if not result or result["exit"] != 0 or "steps" not in result:
            return None
        return result["steps"][-1][name] if name == key else result[name]

    def ratio(a, b) -> str:
        return f"{a / b:.2f}" if a is not None and b else "-"

    def cell(value) -> str:
        return "failed" if value is None else f"{value:.2f}"

    lines = [f"| round | ours {unit} | ours (store) {unit} | original {unit} | ours / original | ours (store) / "
             "original | peak RSS GiB ours / store / original |", "|---|---|---|---|---|---|---|"]
    columns: dict[str, list[float]] = {}
    for round_ in sorted({r["round"] for r in results}):
        by_side = {r["side"]: r for r in results if r["round"] == round_}
        steps = [figure(by_side.get(side), key) for side in SIDES]
        rss = [figure(by_side.get(side), "peak_rss_gib") for side in SIDES]
        for side, step, peak in zip(SIDES, steps, rss):
            for name, value in ((f"{side} s", step), (f"{side} rss", peak)):
                if value is not None:
                    columns.setdefault(name, []).append(value)
        lines.append(f"| {round_} | {cell(steps[0])} | {cell(steps[1])} | {cell(steps[2])} | {ratio(steps[0], steps[2])} "
                     f"| {ratio(steps[1], steps[2])} | {' / '.join(cell(v) for v in rss)} |")
    median = {name: statistics.median(values) for name, values in columns.items()}
    steps = [median.get(f"{side} s") for side in SIDES]
    rss = [median.get(f"{side} rss") for side in SIDES]
    lines.append(f"| median | {cell(steps[0])} | {cell(steps[1])} | {cell(steps[2])} | {ratio(steps[0], steps[2])} | "
                 f"{ratio(steps[1], steps[2])} | {' / '.join(cell(v) for v in rss)} |")
    return "\n".join(lines)


def main() -> None:
    import os
    import shutil
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("large", "full"), required=True)
    parser.add_argument("--original", type=Path, required=True, help="a checkout of the original DiT4DiT")
    parser.add_argument("--original_python", default=sys.executable, help="an interpreter that imports it")
    parser.add_argument("--snapshot", type=Path, help="the snapshot (full: default " + str(FULL_SNAPSHOT) +
                        "; large: written into the work folder when absent)")
    parser.add_argument("--workdir", type=Path, help="data, logs and results (default: a temporary folder)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min_available_gib", type=float, default=8.0)
    args = parser.parse_args()
    args.original = args.original.resolve()
    run_original_check(args.original, args.original_python)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_step_work_"))
    work.mkdir(parents=True, exist_ok=True)
    env = {"PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "OMP_NUM_THREADS": str(os.cpu_count() or 1),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    snapshot = args.snapshot or (FULL_SNAPSHOT if args.size == "full" else work / "snapshot_large")
    from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

    if pipeline_folder_problems(snapshot):
        if args.size == "full":
            raise SystemExit(f"{snapshot}: not a complete snapshot; python -m DiT4DiT.tools.full_size_cosmos --out DIR")
        run_phase("snapshot", [sys.executable, "-m", "DiT4DiT.tools.full_size_cosmos", "--out", str(snapshot),
                               "--size", "large", "--overwrite"], work / "snapshot.log", env)
    data = work / "data"
    if not data.is_dir():
        subprocess.run([sys.executable, "-m", "DiT4DiT.tools.tiny_robotwin", "--out", str(data)], cwd=REPO,
                       env={**os.environ, **env}, check=True, capture_output=True)
    results = rounds(args, snapshot, data, work, LARGE_KEYS if args.size == "large" else [], env)
    print(f"\nours with and without the latent store against the original ({args.original}), {args.size}, batch 1, "
          f"second of 2 steps, {os.cpu_count()} CPU cores, snapshot {snapshot}\n")
    print(table(results))
    if all("cpu_s" in r["steps"][-1] for r in results if "steps" in r):
        print("\nthe same steps in CPU seconds (every thread's: the work, whatever else the machine ran)\n")
        print(table(results, "cpu_s", "CPU s/step"))
    for result in results:
        print(round_line(result))
    print(f"logs: {work}")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
