"""What the prompt-embedding store and the start-up will need: store size, free disk, host memory per node.

    python -m DiT4DiT.doctor.store_estimate CONFIG_YAML BASE_MODEL     -> one JSON line

The store holds one embedding per unique instruction of the mixture: max_sequence_length tokens x (text-encoder
layers x hidden size) in the pipeline dtype (512 x 28 x 3584 x 2 B = 98 MiB for the 2B snapshot). Reads
metadata only and never imports torch, so the doctor calls it in its own process (a probe process cost 5 s).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkCosmos25Section
from DiT4DiT.config.typed import section
from DiT4DiT.dataloader.cache import store_root
from DiT4DiT.dataloader.layout import is_dataset
from DiT4DiT.dataloader.mixtures import resolve_data_mix
from DiT4DiT.dataloader.reader import DatasetLayout
from DiT4DiT.facts import DTYPE_BYTES


def unique_instructions(vla: DatasetsVlaDataSection) -> tuple[int, int]:
    """(unique task strings over the mixture's datasets found under data_root_dir, datasets found)."""
    root = Path(vla.data_root_dir or ".").expanduser()
    tasks, found = set(), 0
    for entry in resolve_data_mix(vla.data_mix, vla.data_config):
        if is_dataset(root / entry.dataset):
            tasks.update(DatasetLayout(root / entry.dataset).tasks.values())
            found += 1
    return len(tasks), found


def embedding_bytes(cosmos: FrameworkCosmos25Section, base_model: Path) -> int:
    config = json.loads((base_model / "text_encoder" / "config.json").read_text())
    text = config.get("text_config", config)
    width = int(text["num_hidden_layers"]) * int(text["hidden_size"])
    return int(cosmos.max_sequence_length) * width * DTYPE_BYTES[str(cosmos.torch_dtype)]


def stored_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.safetensors")) if folder.is_dir() else 0


def free_bytes(folder: Path) -> int:
    """Free space on the filesystem that will hold `folder` (its nearest existing parent)."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    return shutil.disk_usage(existing).free


def estimate(config_yaml: str, base_model: str) -> dict:
    cfg = load_config(config_yaml, [f"framework.cosmos25.base_model={base_model}"])
    cosmos = section(cfg.framework.cosmos25, FrameworkCosmos25Section)
    vla = section(cfg.datasets.vla_data, DatasetsVlaDataSection)
    instructions, datasets = unique_instructions(vla)
    folder = store_root("prompt", cosmos.prompt_store_dir, vla.cache_dir)
    each = embedding_bytes(cosmos, Path(base_model))
    return {
        "instructions": instructions,
        "datasets": datasets,
        "embedding_bytes": each,
        "store_bytes": instructions * each,
        "stored_bytes": stored_bytes(folder),
        "store_dir": str(folder),
        "free_bytes": free_bytes(folder),
        "num_workers": vla.num_workers,
        "prompt_cache": cosmos.prompt_cache,
    }


if __name__ == "__main__":
    print(json.dumps(estimate(sys.argv[1], sys.argv[2])))
