"""Prompt-embedding store at many instructions: per-process memory, encoding on reuse, start-up time.

    .venv/bin/python bench/bench_prompt_store.py --instructions 50,2000 --processes 4 --json FILE

For each instruction count: `accelerate launch` starts --processes real processes on a fresh, empty store;
each builds a generated text encoder (Qwen2.5-VL class, 8 layers x 512 wide, 64 tokens, float32: 1 MiB per
embedding), fills the store (the missing instructions split across ranks), releases the encoder, then reads
every embedding once, in batches of 4, as training does. Once every process is there, this process reads
each one's /proc/PID/smaps_rollup (USS = private pages, PSS = proportional share) and lets them exit. Then
the same again with the store present. JSON: {"runs": [{instructions, processes, reused, encoded, uss_mb_max,
pss_mb_total, store_mb, startup_s}, ...]}; a table is printed too. Goals: uss_mb_max at the largest count
within 1.2x of the smallest; encoded = 0 when reused.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TEXT_LAYERS, TEXT_HIDDEN, TOKENS = 8, 512, 64  # 64 x 4096 x 4 B = 1 MiB per embedding
READ_BATCH = 4
MIB = 2**20


def instructions(count: int) -> list[str]:
    return [f"task {i}: pick up object {i % 97} and put it on target {i % 89}, then step back" for i in range(count)]


def build_text_encoder(tokenizer):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=TEXT_HIDDEN, intermediate_size=2 * TEXT_HIDDEN,
            num_hidden_layers=TEXT_LAYERS, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
            rope_scaling={"type": "mrope", "mrope_section": [8, 12, 12]}, tie_word_embeddings=False,
        ),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=TEXT_HIDDEN,
                           fullatt_block_indexes=[0]),
    )
    return Qwen2_5_VLForConditionalGeneration(config).eval(), config


def worker(store_dir: Path, count: int, signals: Path) -> None:
    """One training process's start-up: fill the store, release the encoder, read every embedding once."""
    from datetime import timedelta

    import torch
    from accelerate import Accelerator

    from DiT4DiT.model.modules.prompt_encoding import encode_prompts
    from DiT4DiT.model.modules.node_store import Ranks
    from DiT4DiT.model.modules.prompt_store import PromptStore
    from DiT4DiT.training.host_waits import HostWaits
    from DiT4DiT.tools.tiny_cosmos import build_tokenizer

    torch.set_num_threads(1)
    accelerator = Accelerator()
    torch.manual_seed(0)  # the same encoder on every rank
    tokenizer = build_tokenizer()
    text_encoder, config = build_text_encoder(tokenizer)
    identity = hashlib.sha256(config.to_json_string().encode()).hexdigest()[:32]
    store = PromptStore(store_dir, identity, TOKENS, torch.float32)
    wanted = instructions(count)
    report = store.fill(wanted, lambda chunk: encode_prompts(text_encoder, tokenizer, chunk, TOKENS),
                        Ranks.from_accelerator(accelerator, HostWaits(timedelta(minutes=10)).all_sum))
    del text_encoder  # released, as the trainer does once every instruction is stored
    gc.collect()
    checksum = 0.0
    for start in range(0, len(wanted), READ_BATCH):
        checksum += float(torch.stack([store.embedding(p) for p in wanted[start : start + READ_BATCH]]).sum())
    record = {"pid": os.getpid(), "encoded": report.encoded, "store_bytes": report.store_bytes, "checksum": checksum}
    (signals / f"ready{accelerator.process_index}.json").write_text(json.dumps(record))
    while not (signals / "go").exists():
        time.sleep(0.05)


def smaps_rollup_mb(pid: int) -> tuple[float, float]:
    """(USS, PSS) of a process in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":")
        fields[name] = int(value.split()[0]) * 1024
    uss = fields["Private_Clean"] + fields["Private_Dirty"] + fields.get("Private_Hugetlb", 0)
    return uss / MIB, fields["Pss"] / MIB


def start(store_dir: Path, count: int, processes: int, reused: bool, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as signals:
        signals = Path(signals)
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                   str(REPO / "DiT4DiT/config/deepseeds/cpu.yaml"), "--num_processes", str(processes),
                   __file__, "--worker", str(store_dir), str(count), str(signals)]
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        began = time.perf_counter()
        launcher = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = []
        while len(ready) < processes:
            if launcher.poll() is not None or time.perf_counter() - began > timeout_s:
                launcher.kill()
                raise RuntimeError(f"workers did not start ({count} instructions): {launcher.stderr.read()[-3000:]}")
            ready = sorted(signals.glob("ready*.json"))
            time.sleep(0.05)
        startup_s = time.perf_counter() - began
        records = [json.loads(path.read_text()) for path in ready]
        memory = [smaps_rollup_mb(r["pid"]) for r in records]
        (signals / "go").touch()
        launcher.wait(timeout=120)
    if len({r["checksum"] for r in records}) != 1:
        raise RuntimeError("the processes read different embeddings")
    return {
        "instructions": count,
        "processes": processes,
        "reused": reused,
        "encoded": records[0]["encoded"],
        "uss_mb_max": round(max(uss for uss, _ in memory), 1),
        "pss_mb_total": round(sum(pss for _, pss in memory), 1),
        "store_mb": round(records[0]["store_bytes"] / MIB, 1),
        "startup_s": round(startup_s, 2),
    }


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instructions", default="50,2000", help="comma-separated instruction counts")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--json", type=Path, help="write the runs here")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one start may take")
    args = parser.parse_args()
    runs = []
    for count in (int(c) for c in args.instructions.split(",")):
        with tempfile.TemporaryDirectory(prefix="prompt_store_bench.") as store_dir:
            for reused in (False, True):
                runs.append(start(Path(store_dir), count, args.processes, reused, args.timeout))
                print(json.dumps(runs[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    print(f"{'instructions':>12} {'reused':>6} {'encoded':>7} {'USS max MiB':>11} {'PSS total MiB':>13} "
          f"{'store MiB':>9} {'start-up s':>10}")
    for run in runs:
        print(f"{run['instructions']:>12} {str(run['reused']):>6} {run['encoded']:>7} {run['uss_mb_max']:>11.1f} "
              f"{run['pss_mb_total']:>13.1f} {run['store_mb']:>9.1f} {run['startup_s']:>10.2f}")
    smallest, largest = runs[0], runs[-2]
    print(f"USS at {largest['instructions']} / at {smallest['instructions']} instructions (fresh store): "
          f"{largest['uss_mb_max'] / smallest['uss_mb_max']:.2f}x (goal <= 1.2x)")


if __name__ == "__main__":
    main()
