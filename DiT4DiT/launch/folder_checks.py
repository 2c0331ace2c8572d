"""Is a base-model snapshot or a data root complete enough to start training? (Standard library only.)

Shared by the launcher's preflight and the doctor, so a half-downloaded snapshot is reported in seconds,
before 16 processes start, not as a stack trace after model loading. Each function returns one problem per
item ([] when the folder is complete).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

from DiT4DiT.facts import PIPELINE_PARTS

WEIGHTED_PARTS = ("text_encoder", "transformer", "vae")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def safetensors_problem(path: Path) -> str | None:
    """Read the header of a .safetensors file: it must be JSON whose tensors end exactly at the file's end.

    Costs one small read per file, so a truncated or garbage download is caught before any process starts.
    """
    size = path.stat().st_size
    fix = "the download was interrupted or the file is damaged; download it again"
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return f"{path}: {size} bytes, too short for a safetensors header; {fix}"
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > size - 8:
            return f"{path}: not a safetensors file (header length {header_len} > file size {size}); {fix}"
        try:
            header = json.loads(handle.read(header_len))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return f"{path}: not a safetensors file (unreadable header); {fix}"
    if 8 + header_len + end != size:
        return f"{path}: {size} bytes, but its header describes {8 + header_len + end}; {fix}"
    return None


def _shard_problems(part_dir: Path) -> list[str]:
    problems: list[str] = []
    indexes = sorted(part_dir.glob("*.index.json"))
    for index in indexes:
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError) as err:
            problems.append(f"{index}: unreadable shard index ({err})")
            continue
        missing = sorted(s for s in shards if not (part_dir / s).is_file())
        if missing:
            problems.append(f"{part_dir}: {len(missing)} weight shard(s) missing, e.g. {missing[0]}")
    if not indexes and not any(p.suffix in WEIGHT_SUFFIXES for p in part_dir.iterdir()):
        problems.append(f"{part_dir}: no weight file (*.safetensors or *.bin)")
    problems += filter(None, (safetensors_problem(p) for p in sorted(part_dir.glob("*.safetensors"))))
    return problems


def base_model_problems(folder: str | Path) -> list[str]:
    """What is missing from a local Cosmos-Predict2.5 pipeline folder ([] when complete)."""
    root = Path(folder)
    if not root.is_dir():
        return [f"{root}: base model folder does not exist"]
    problems: list[str] = []
    index = root / "model_index.json"
    if not index.is_file():
        problems.append(f"{index}: missing (not a diffusers pipeline snapshot)")
    else:
        try:
            json.loads(index.read_text())
        except ValueError as err:
            problems.append(f"{index}: not valid JSON ({err}); the download was probably interrupted")
    for part, config in PIPELINE_PARTS.items():
        part_dir = root / part
        if not (part_dir / config).is_file():
            problems.append(f"{part_dir / config}: missing")
        elif part in WEIGHTED_PARTS:
            problems.extend(_shard_problems(part_dir))
    return problems


def dataset_folders(root: Path) -> list[Path]:
    """LeRobot dataset folders (those with meta/info.json) one or two levels below `root`."""
    return sorted(p.parent.parent for p in [*root.glob("*/meta/info.json"), *root.glob("*/*/meta/info.json")])


def data_root_problems(folder: str | Path, data_mix: str | None = None) -> list[str]:
    """What is wrong with a data root ([] when complete).

    Without `data_mix`: it must hold at least one LeRobot dataset folder. With it: the trainer's rule
    (`mixture_presence`): at least one dataset of the mixture is there, and each one there has meta/info.json
    (resolving names imports the data package, hence torch: lazy).
    """
    root = Path(folder)
    if not root.is_dir():
        return [f"{root}: data root folder does not exist"]
    if data_mix is None:
        if not dataset_folders(root):
            return [f"{root}: no dataset folder with meta/info.json inside (expected <data_root>/<dataset>/meta/info.json)"]
        return []
    from DiT4DiT.dataloader.mixtures import mixture_presence, resolve_mixture

    try:
        entries = resolve_mixture(data_mix)
    except ValueError as err:
        return [str(err)]
    found, missing, problem = mixture_presence(entries, root, data_mix)
    if problem:
        return [problem]
    if missing:
        # The trainer's rule: missing datasets are skipped (it warns too); only an empty mixture stops the run.
        print(f"note: {root}: {len(missing)} of {len(entries)} datasets of mixture '{data_mix}' are not there "
              f"(e.g. {missing[0]}); training skips them", file=sys.stderr)
    return [f"{root / e.dataset}: no meta/info.json (not a LeRobot dataset folder)" for e in found
            if not (root / e.dataset / "meta" / "info.json").is_file()]


def names_files(data_mix: str) -> bool:
    """Whether data_mix is a path (a dataset, a folder of them, a mixture file) rather than a mixture name."""
    from DiT4DiT.dataloader.mixtures import is_path

    return is_path(data_mix)


def data_mix_problems(data_mix: str) -> list[str]:
    """A data_mix given as a path: the dataset folder, folder of datasets or mixture file resolves."""
    from DiT4DiT.dataloader.mixtures import resolve_data_mix

    try:
        resolve_data_mix(data_mix)
    except ValueError as err:
        return [str(err)]
    return []
