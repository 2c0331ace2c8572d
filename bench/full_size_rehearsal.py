"""Full-size rehearsal on a CPU: the real job at the real width, batch 1, through the real entry points, for each of
the shipped configs (robotwin, libero, robocasa_gr1, g1).

    python bench/full_size_rehearsal.py [--config_yaml NAME|PATH ...] [--phases train,...] [--snapshot DIR]
        [--workdir DIR] [--min_available_gib 16] [--smoke]
        [--original PATH [--original_python PY] [--rounds 3] [--compare_only]]
    make rehearsal [ORIGINAL=PATH ORIGINAL_PYTHON=PY] [REHEARSAL_ARGS=...]

Each phase is its own process, as users run it; its wall time and peak RSS (wait4's ru_maxrss: the process and
the children it waited for) go into the table, with the memory estimate for exactly the run it made (the config,
its frozen set, batch 1, its views and frames, its checkpointing; one CPU process, no DeepSpeed) next to the
training phases' peaks. Per config (--config_yaml, default all four):
  snapshot       python -m DiT4DiT.tools.full_size_cosmos (once; skipped when --snapshot holds a complete one)
  doctor         python -m DiT4DiT.doctor, the config as shipped, 16 processes of an A3 node (fake npu-smi)
  preflight      python -m DiT4DiT.launch --dry-run, the same job: its memory plan and preflight
  train          accelerate launch of DiT4DiT/training/train.py: the config on tiny data of its own mixture (its
                 views and frames, 224 px) at batch 1 for 2 steps, a training state saved after each; a frozen text
                 encoder fills the prompt store at its real size (512 x 28 x 3584 bf16 per instruction), a trained
                 one runs every step (the snapshot's thin encoder: the estimate follows its widths)
  resume         step 2's state moved aside, --trainer.is_resume true: continues from step 1; step 2's losses must
                 equal the uninterrupted run's
  checkpointing  1 step with --trainer.enable_gradient_checkpointing=true (configs that leave it off)
  serve          python -m DiT4DiT.serving.server on the run's final weights, answering one request
  compare        with --original PATH (a checkout of the original DiT4DiT, never vendored), robotwin only:
                 bench/step_timing.py writes the config and one batch, then --rounds rounds of two processes, ours
                 then the original's (its checkout first on sys.path, ours off it), each loading the snapshot with
                 the same config keys and frozen set and timing 2 steps (forward, backward, clipping, AdamW) on that
                 batch; the table holds the second step's time and each process's peak RSS, and their ratios; then
                 how far apart the two action heads sample on the same input
To fit 24 GB each run freezes the transformer's blocks (2B parameters of AdamW state would need ~16 GB more), so
the video loss's backward still passes through all 28 blocks to the patch embedding, the text projection and, in
the configs that train everything, to the text encoder and the VAE, which train as the config asks (FIT_24GB says
what else each run changes). The training phases run with glibc returning freed memory (MALLOC_MMAP_THRESHOLD_=65536,
--glibc_defaults to leave it), so RSS follows the bytes alive. A training phase waits until MemAvailable reaches its
estimate plus 2 GiB and --min_available_gib (the machine may be shared).
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
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from DiT4DiT.base_model import cosmos_2b  # noqa: E402
from DiT4DiT.memory.estimate import GIB, Estimate  # noqa: E402
from DiT4DiT.memory.plan import ORIGINAL_CONFIGS  # noqa: E402

CONFIGS = ORIGINAL_CONFIGS  # name -> YAML: the four shipped configs
BLOCKS = "backbone_interface.extractor.transformer.transformer_blocks"
TEXT_ENCODER, VAE = "backbone_interface.extractor.text_encoder", "backbone_interface.extractor.vae"
# What each config's run changes to fit this 24 GB machine (its estimate at full size with the thin text encoder):
# overrides and the reason, stated in the table.
FIT_24GB = {
    "robotwin": ([f"--trainer.freeze_modules={TEXT_ENCODER},{VAE},{BLOCKS}"],
                 "the transformer's blocks frozen (the config freezes the text encoder and the VAE)"),
    "libero": ([f"--trainer.freeze_modules={BLOCKS}", "--trainer.text_encoder_gradient_checkpointing=true"],
               "the transformer's blocks frozen; the text encoder's layers checkpointed (2 views: 19.3 GiB without)"),
    "robocasa_gr1": ([f"--trainer.freeze_modules={BLOCKS}"], "the transformer's blocks frozen"),
    "g1": ([f"--trainer.freeze_modules={BLOCKS}"], "the transformer's blocks frozen"),
}
PHASES = ("doctor", "preflight", "train", "resume", "checkpointing", "serve")
PHASE_OVERHEAD_GIB = 2.0  # a training phase waits for its estimate plus this much MemAvailable
GLIBC_RETURNS_FREED = {"MALLOC_MMAP_THRESHOLD_": "65536"}
# torch 2.7.1's oneDNN computes a bf16 3-D convolution's weight gradient with an AMX kernel that corrupts the heap
# ("double free or corruption", or a segfault: a bf16 Conv3d(8, 8, 3) on 3 frames of 224 x 224 is enough), which a
# run that trains the VAE runs. Below AMX (AVX512_CORE_BF16) it does not, at 3-10x the time of AMX's bf16 matmuls,
# so only those runs are capped. Devices never run oneDNN. A value in the environment is kept.
ONEDNN_WITHOUT_AMX_CONV_BUG = {"ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")}
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
    prepared = run_phase("compare: prepare", [sys.executable, step_timing, "prepare", "--config_yaml",
                                              CONFIGS["robotwin"], "--out", str(folder),
                                              *training_overrides("robotwin", snapshot, data, work), *keys],
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
            f"{last['backward_s']:.2f} s, AdamW {last['optimizer_s']:.2f} s"
            + (f" ({last['cpu_s']:.1f} CPU s, {last['major_faults']} major faults)" if "cpu_s" in last else "")
            + "; losses "
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


def trainer_args(name: str, snapshot: Path, data: Path, work: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "DiT4DiT/config/deepseeds/cpu.yaml",
            "--num_processes", "1", "DiT4DiT/training/train.py", "--config_yaml", CONFIGS[name],
            *training_overrides(name, snapshot, data, work), *extra]


# --smoke: the test-size snapshot (4 blocks of width 32) with the configs' backbone keys fitted to it.
SMOKE_KEYS = ["--framework.cosmos25.extract_layer=2", "--framework.cosmos25.vl_hidden_dim=32",
              "--framework.action_model.diffusion_model_cfg.cross_attention_dim=32"]


def training_overrides(name: str, snapshot: Path, data: Path, work: Path) -> list[str]:
    """The rehearsal's run of config `name`: its data, batch 1, 2 steps with a state after each, and FIT_24GB."""
    return [f"--framework.cosmos25.base_model={snapshot}", f"--datasets.vla_data.data_root_dir={data}",
            f"--run_root_dir={work / 'runs'}", f"--run_id=rehearsal_{name}", "--trackers=[jsonl]",
            f"--datasets.vla_data.cache_dir={work / 'cache'}", "--datasets.vla_data.num_workers=0",
            "--datasets.vla_data.per_device_batch_size=1", "--trainer.max_train_steps=2",
            "--trainer.save_interval=1", "--trainer.logging_frequency=1", *FIT_24GB[name][0],
            # The run measures its peak against the estimate; the start-up check would compare the same estimate
            # with a shared machine's momentary MemAvailable.
            "--trainer.ignore_resource_check=true"]


def run_estimate(name: str, snapshot: Path, data: Path, work: Path, *extra: str) -> Estimate:
    """The memory estimate for the rehearsal's own run of config `name` (with `extra` overrides): one CPU process,
    no DeepSpeed, the views of the config's mixture."""
    from DiT4DiT.config.schema import load_config, normalize_cli_overrides
    from DiT4DiT.memory.estimate import estimate_training_memory, mixture_views

    overrides = normalize_cli_overrides([*training_overrides(name, snapshot, data, work), *extra])
    typed = load_config(str(REPO / CONFIGS[name]), overrides)
    data_section = typed.datasets.vla_data
    views = mixture_views(data_section.data_mix, data_section.data_config)
    return estimate_training_memory(snapshot, typed.framework, typed.trainer, data_section, 1, views, zero_stage=0,
                                    device_kind="cpu")


def config_data(name: str, work: Path) -> Path:
    """Tiny data of the config's own mixture (its cameras and state/action keys): the RoboTwin-shaped set for
    robotwin, one dataset of the mixture for the others."""
    from DiT4DiT.tools import tiny_dataset, tiny_robotwin

    data = work / f"data_{name}"
    if not data.is_dir():
        if name == "robotwin":
            tiny_robotwin.generate(data)
        else:
            tiny_dataset.generate(OmegaConf.load(REPO / CONFIGS[name]).datasets.vla_data.data_mix, data, datasets=1,
                                  episodes=2, frames=(20, 28))
    return data


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
        "try:\n"
        "    client = PolicyClient('127.0.0.1', server.port, wait_s=1800)\n"
        "    example = bench_serving.request_for(client.metadata, 0)\n"
        "    size, views = client.metadata['image_size'], client.metadata['limits']['max_views']\n"
        "    example['image'] = [example['image'][0][:, :size * views]]  # the run's cameras side by side\n"
        "    started = time.monotonic(); reply = client.infer([example])\n"
        "    print('request answered in %%.1f s:' %% (time.monotonic() - started), {k: getattr(v, 'shape', v) for k, v in reply.items()})\n"
        "    client.close()\n"
        "finally:\n"
        "    print('server exit', server.stop())\n"
    ) % (str(REPO), str(REPO / "bench"), str(final))
    return run_phase("serve", [sys.executable, "-c", code], log)


def rehearse(args, name: str, work: Path, keys: list[str], env: dict, train_env: dict) -> list[dict]:
    """The phases of config `name` in args.phases, from the doctor to the server: one row each."""
    rows, logs, config = [], work / name, CONFIGS[name]
    logs.mkdir(exist_ok=True)
    data = config_data(name, work)
    phases = args.phases
    fake_a3 = {"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}", "FAKE_NPU_SMI_LAYOUT": "a3",
               "FAKE_NPU_SMI_IDLE": "1"}
    # The doctor and the launcher check the job as shipped; with --smoke its keys do not fit the small snapshot.
    if "doctor" in phases:
        rows.append(run_phase("doctor", [sys.executable, "-m", "DiT4DiT.doctor", "--config_yaml", config,
                                         "--base_model", str(args.snapshot), "--num_processes", "16"],
                              logs / "doctor.log", {**env, **fake_a3}))
    if "preflight" in phases:
        rows.append(run_phase("preflight", [sys.executable, "-m", "DiT4DiT.launch", "--dry-run", "--device=npu",
                                            f"--config_yaml={config}", f"--base_model={args.snapshot}",
                                            f"--data_root_dir={data}", "--num_processes=16"],
                              logs / "preflight.log", {**env, **fake_a3}))

    def train_phase(phase: str, *extra: str) -> dict:
        estimate = run_estimate(name, args.snapshot, data, work, *keys, *extra)
        # What the run needs: its estimate, the libraries and the heap glibc keeps (docs/full-size.md), or more.
        wait_for_memory(max(args.min_available_gib, estimate.total_gib + PHASE_OVERHEAD_GIB), f"{name} {phase}")
        row = run_phase(phase, trainer_args(name, args.snapshot, data, work, *keys, *extra), logs / f"{phase}.log",
                        train_env)
        row["estimate"] = estimate
        return row

    if not any(f"{VAE}," in f"{flag}," for flag in FIT_24GB[name][0]):  # the run trains the VAE
        train_env = {**train_env, **ONEDNN_WITHOUT_AMX_CONV_BUG}
    run_dir = work / "runs" / f"rehearsal_{name}"
    uninterrupted = {}
    if "train" in phases:
        train = train_phase("train")
        train["result"] = FIT_24GB[name][1]
        rows.append(train)
        uninterrupted = step_losses(run_dir / "metrics.jsonl") if train["exit"] == 0 else {}
        if train["exit"] == 0 and "resume" in phases:
            aside = work / "aside" / name
            aside.mkdir(parents=True, exist_ok=True)
            for moved in ("checkpoints/steps_2_training_state", "checkpoints/steps_2_pytorch_model.pt", "final_model"):
                shutil.move(str(run_dir / moved), str(aside / Path(moved).name))
            resume = train_phase("resume", "--trainer.is_resume=true")
            resumed = step_losses(run_dir / "metrics.jsonl") if resume["exit"] == 0 else {}
            resume["result"] = ("step 2 losses equal" if resumed.get(2) == uninterrupted.get(2) and 2 in resumed
                                else f"step 2 differs: {uninterrupted.get(2)} vs {resumed.get(2)}")
            rows.append(resume)
            if not (run_dir / "final_model").is_dir():  # the resume failed: serve the uninterrupted run's weights
                shutil.move(str(aside / "final_model"), str(run_dir / "final_model"))
    if "checkpointing" in phases and not OmegaConf.load(REPO / config).trainer.get("enable_gradient_checkpointing"):
        rows.append(train_phase("checkpointing", "--trainer.enable_gradient_checkpointing=true",
                                "--trainer.max_train_steps=1", f"--run_id=rehearsal_{name}_checkpointing"))
    final = run_dir / "final_model" / "pytorch_model.pt"
    if "serve" in phases and final.is_file():  # the server reads the run folder around it: config, statistics
        wait_for_memory(args.min_available_gib / 2, "serve")
        rows.append(serve_once(final, logs / "serve.log"))
    for row in rows:
        row["config"] = name
    if not args.keep:
        drop_weights(work, name)
    if uninterrupted:
        print(f"{name}: losses (uninterrupted): {uninterrupted}")
    for log, marker in (("doctor.log", "device_memory"), ("preflight.log", "memory:")):
        path = logs / log
        text = path.read_text().splitlines() if path.is_file() else []
        start = next((i for i, line in enumerate(text) if marker in line), None)
        if start is not None:
            print(f"{name} {log.split('.')[0]}: " + "\n  ".join(
                line.strip() for line in text[start:start + 8] if line.startswith((" ", marker, "PASS", "FAIL", "SKIP"))))
    return rows


def print_table(rows: list[dict], snapshot: Path, work: Path) -> None:
    """Every phase's row, the training phases with their estimate (and its parts) and peak / estimate."""
    print(f"\nfull-size rehearsal, {os.cpu_count()} CPU cores, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB RAM, snapshot {snapshot}\n")
    print("| config | phase | exit | wall s | peak RSS GiB | estimate GiB (weights+optimizer / activations, of which "
          "text encoder + VAE graphs) | peak / estimate | note |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        est: Estimate | None = row.get("estimate")
        cell, ratio = "-", "-"
        if est is not None:
            cell = (f"{est.total_gib:.2f} ({est.static_gib:.2f} / {est.activation_gib:.2f}, "
                    f"{est.trained_inputs_gib:.2f})")
            ratio = f"{row['peak_rss_gib'] / est.total_gib:.2f}"
        print(f"| {row.get('config', '-')} | {row['phase']} | {row['exit']} | {row['wall_s']:.0f} | "
              f"{row['peak_rss_gib']:.2f} | {cell} | {ratio} | {row.get('result', '')} |")
    store = sorted((work / "cache").rglob("prompt_embeddings/**/*.safetensors"))
    print(f"prompt store: {len(store)} embedding file(s), {sum(p.stat().st_size for p in store) / 2**20:.0f} MiB "
          f"(one embedding: {cosmos_2b.prompt_embedding_bytes() / 2**20:.0f} MiB)")


def drop_weights(work: Path, name: str) -> None:
    """Config `name`'s checkpoints and final weights, once its phases are done: they are the rehearsal's means, not
    its result (its logs and metrics stay), and four configs' weights with their AdamW states fill a disk (15 GB at
    the test size's full-width action head)."""
    for run in (work / "runs").glob(f"rehearsal_{name}*"):
        for weights in ("checkpoints", "final_model"):
            shutil.rmtree(run / weights, ignore_errors=True)
    shutil.rmtree(work / "aside" / name, ignore_errors=True)


def config_names(values: list[str]) -> list[str]:
    """--config_yaml values (names of CONFIGS or their paths, comma-separated or repeated) as config names."""
    by_path = {(REPO / path).resolve(): name for name, path in CONFIGS.items()}
    names = []
    for value in (v for item in values for v in item.split(",") if v):
        name = value if value in CONFIGS else by_path.get(Path(value).resolve())
        if name is None:
            raise SystemExit(f"--config_yaml {value}: not a shipped config; use one of {', '.join(CONFIGS)} "
                             f"({', '.join(CONFIGS.values())})")
        names.append(name)
    return list(dict.fromkeys(names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot", type=Path, default=None,
                        help="the full-size snapshot, written there when absent (default: " + str(FULL_SNAPSHOT) +
                             "; with --smoke: <workdir>/snapshot_test)")
    parser.add_argument("--workdir", type=Path, default=None, help="runs, data and logs (default: a temporary folder)")
    parser.add_argument("--min_available_gib", type=float, default=16.0,
                        help="MemAvailable a heavy phase waits for (default 16; a training phase: at least its "
                             f"estimate + {PHASE_OVERHEAD_GIB:g} GiB)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work folder and every run's weights (by default a config's checkpoints and "
                             "final model go once its phases are done)")
    parser.add_argument("--smoke", action="store_true",
                        help="check this script in minutes: a test-size snapshot (python -m DiT4DiT.tools.full_size_cosmos "
                             "--size test) instead of the full one")
    parser.add_argument("--original", type=Path, default=None,
                        help="a checkout of the original DiT4DiT: also time its steps against ours (the compare phase)")
    parser.add_argument("--original_python", default=sys.executable,
                        help="the interpreter for the original's processes (an environment with what it imports)")
    parser.add_argument("--rounds", type=int, default=3, help="compare: rounds of ours then the original's (default 3)")
    parser.add_argument("--compare_only", action="store_true", help="with --original: only the compare phase")
    parser.add_argument("--config_yaml", action="append", default=None,
                        help=f"a shipped config to rehearse, by name or path, repeated or comma-separated (default: "
                             f"all of {', '.join(CONFIGS)})")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"phases to run (default: {','.join(PHASES)})")
    parser.add_argument("--glibc_defaults", action="store_true",
                        help="train without MALLOC_MMAP_THRESHOLD_=65536 (glibc then keeps freed memory: RSS above "
                             "the bytes alive)")
    args = parser.parse_args()
    args.phases = tuple(p for p in args.phases.split(",") if p)
    if unknown := sorted(set(args.phases) - set(PHASES)):
        parser.error(f"--phases: {', '.join(unknown)} is not a phase ({', '.join(PHASES)})")
    configs = config_names(args.config_yaml or list(CONFIGS))
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
    train_env = {**env, **({} if args.glibc_defaults else GLIBC_RETURNS_FREED)}
    rows = []
    from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

    if pipeline_folder_problems(args.snapshot):
        wait_for_memory(args.min_available_gib / 2, "snapshot")
        size = ["--size", "test"] if args.smoke else []
        rows.append(run_phase("snapshot", [sys.executable, "-m", "DiT4DiT.tools.full_size_cosmos", "--out",
                                           str(args.snapshot), "--overwrite", *size], work / "snapshot.log", env))
    if not args.compare_only:
        for name in configs:
            rows += rehearse(args, name, work, keys, env, train_env)
        print_table(rows, args.snapshot, work)
    if args.original is not None:
        results = compare(args, args.snapshot, config_data("robotwin", work), work, keys, env)
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
