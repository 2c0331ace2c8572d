"""Run under `accelerate launch`: fill a prompt store from every rank, then write what this rank encoded.

    fill_prompt_store.py STORE_DIR OUT_DIR      -> OUT_DIR/rank{r}.json
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator

from DiT4DiT.model.modules.node_store import Ranks
from DiT4DiT.model.modules.prompt_store import PromptStore
from DiT4DiT.training.host_waits import HostWaits
from DiT4DiT.training.process_group import destroy_process_group

INSTRUCTIONS = [f"task {i}: move object {i} to place {i % 3}" for i in range(9)]
encoded_here: list[str] = []


def encode(prompts: list[str]) -> torch.Tensor:
    """A deterministic stand-in for the text encoder: each instruction's own seeded noise."""
    rows = []
    for prompt in prompts:
        generator = torch.Generator().manual_seed(sum(prompt.encode()))
        rows.append(torch.randn(16, 8, generator=generator))
    encoded_here.extend(prompts)
    return torch.stack(rows)


def main() -> None:
    store_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    accelerator = Accelerator()
    store = PromptStore(store_dir, "test-encoder", 16, torch.float32)
    ranks = Ranks.from_accelerator(accelerator, HostWaits(timedelta(minutes=10)).all_sum)
    report = store.fill(INSTRUCTIONS, encode, ranks, batch_size=2)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "rank": accelerator.process_index,
        "instructions": sorted(INSTRUCTIONS),
        "encoded_here": sorted(encoded_here),
        "report_encoded": report.encoded,
        "lookup_sum": float(torch.stack([store.embedding(p) for p in INSTRUCTIONS]).double().sum()),
    }
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(record))
    destroy_process_group(everyone_here=True)  # before interpreter exit, as the trainer does


if __name__ == "__main__":
    main()
