"""Is a local Cosmos-Predict2.5 pipeline folder complete? The one answer the config check, the launcher's
preflight, the doctor and run-folder loading share. (Standard library only.)

It reads model_index.json and one small header per weight file, so a half-downloaded or damaged snapshot is
named in seconds, before any process starts, not as a stack trace after model loading.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from DiT4DiT.facts import PIPELINE_PARTS, TINY_MODEL_DIR, download_command
from DiT4DiT.base_model.safetensors_header import HeaderError, read_header

KEY = "framework.cosmos25.base_model"
PIPELINE_CLASS = "Cosmos2_5_PredictBasePipeline"
WEIGHTED_PARTS = ("text_encoder", "transformer", "vae")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
TINY_COMMAND = "python -m DiT4DiT.tools.tiny_cosmos"
BLOCK = re.compile(r"transformer_blocks\.(\d+)\.")


def how_to_get(folder: str | Path, exists: bool) -> str:
    """The command that (re)writes `folder`: the tiny pipeline's generator where the folder has its name."""
    if Path(folder).name == Path(TINY_MODEL_DIR).name:
        return f"{TINY_COMMAND} --out {folder}" + (" --overwrite" if exists else "")
    return download_command(folder)


def safetensors_problem(path: Path) -> str | None:
    """Read the header of a .safetensors file: it must be JSON whose tensors end exactly at the file's end."""
    damaged = "an interrupted download or a damaged file"
    try:
        header = read_header(path)
    except HeaderError as error:
        return f"{path}: {error}: {damaged}"
    if header.described_size != header.file_size:
        return f"{path}: {header.file_size} bytes, but its header describes {header.described_size}: {damaged}"
    return None


def _weight_problems(part_dir: Path, fix: str) -> list[str]:
    """Missing weight files and shards (get them), damaged ones (delete them first: a download skips them)."""
    problems: list[str] = []
    indexes = sorted(part_dir.glob("*.index.json"))
    for index in indexes:
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError) as err:
            problems.append(f"{index}: unreadable shard index ({err}); fix: delete it, then {fix}")
            continue
        missing = sorted(s for s in shards if not (part_dir / s).is_file())
        if missing:
            problems.append(f"{part_dir}: {len(missing)} weight shard(s) missing, e.g. {missing[0]}; fix: {fix}")
    if not indexes and not any(p.suffix in WEIGHT_SUFFIXES for p in part_dir.iterdir()):
        problems.append(f"{part_dir}: no weight file (*.safetensors or *.bin); fix: {fix}")
    damaged = filter(None, (safetensors_problem(p) for p in sorted(part_dir.glob("*.safetensors"))))
    return problems + [f"{problem}; fix: delete it, then {fix}" for problem in damaged]


def _declared_size_problems(transformer: Path, fix: str) -> list[str]:
    """transformer/config.json's sizes against the shapes its weights hold: a model is built at the config's sizes
    before any weight loads, so `num_layers: 100000` allocated past 4 GB before anything was checked."""
    config_path = transformer / "config.json"
    try:
        config = json.loads(config_path.read_text())
        shapes = {name: entry["shape"] for weights in sorted(transformer.glob("*.safetensors"))
                  for name, entry in read_header(weights).tensors.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []  # unreadable files are named by the other checks (or by the loader)
    if not shapes:
        return []  # .bin weights: no header to compare with
    first = "transformer_blocks.0."
    width, ff = (shapes.get(first + name, [None])[0] for name in ("attn1.to_q.weight", "ff.net.0.proj.weight"))
    heads, head_dim, ratio = (config.get(key) for key in ("num_attention_heads", "attention_head_dim", "mlp_ratio"))
    blocks = len({int(m.group(1)) for name in shapes if (m := BLOCK.match(name))})
    declared = [("num_layers", config.get("num_layers"), blocks, "transformer blocks"),
                ("num_attention_heads x attention_head_dim", _product(heads, head_dim), width, "channels wide")]
    if width is not None:
        declared.append(("mlp_ratio x width", _product(ratio, width), ff, "feed-forward channels"))
    return [f"{config_path}: {key} says {said}, but its weights hold {held} {what}: the config does not belong to "
            f"these weights (edited, or copied from another model); fix: {fix}"
            for key, said, held, what in declared if held is not None and said != held]


def _product(a, b):
    """a x b for two numbers, else the pair as given (so a config's text or null compares unequal)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return a * b if numbers else (a, b)


def pipeline_folder_problems(folder: str | Path | None, relative_to: Path | None = None) -> list[str]:
    """What keeps `folder` from being a complete Cosmos-Predict2.5 pipeline, one line per problem naming the file
    and ending with the command that gets it ([] when complete).

    A relative `folder` is looked up under `relative_to` (default: the working directory); the commands name it
    as given.
    """
    if folder is None or str(folder) == "":
        return [f"{KEY} is not set: pass --{KEY} DIR, a local Cosmos-Predict2.5 pipeline folder (download one with "
                f"`{download_command('playground/Pretrained_models/Cosmos-Predict2.5-2B')}` or write the tiny one "
                f"with `{TINY_COMMAND}`)"]
    path = Path(relative_to or "") / folder
    if path.exists() and not path.is_dir():
        return [f"{KEY}: '{folder}' is a file, not a folder; point it at the pipeline folder"]
    if not path.is_dir():
        fix = how_to_get(folder, exists=False)
        tiny = "" if fix.startswith(TINY_COMMAND) else f" (or, for a smoke run, the tiny one: {TINY_COMMAND} --out {folder})"
        return [f"{KEY}: folder '{folder}' does not exist; fix: {fix}{tiny}"]
    fix = how_to_get(folder, exists=True)
    index = path / "model_index.json"
    if not index.is_file():
        return [f"{KEY}='{folder}' is not a diffusers pipeline folder ({index} is missing); fix: {fix}"]
    try:
        pipeline = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError) as err:
        return [f"{index}: not valid JSON ({err}), the download was probably interrupted; fix: {fix}"]
    if pipeline != PIPELINE_CLASS:
        return [f"{KEY}='{folder}' holds a {pipeline!r} pipeline, not {PIPELINE_CLASS}; fix: {fix}"]
    problems: list[str] = []
    missing = [part for part, marker in PIPELINE_PARTS.items() if not (path / part / marker).is_file()]
    if missing:
        named = ", ".join(f"'{part}' ({part}/{PIPELINE_PARTS[part]})" for part in missing)
        problems.append(f"{KEY}='{folder}' is incomplete: component{'s' * (len(missing) > 1)} {named} "
                        f"{'are' if len(missing) > 1 else 'is'} missing; fix: {fix}")
    for part in WEIGHTED_PARTS:
        if part not in missing:
            problems += _weight_problems(path / part, fix)
    if not problems:
        problems += _declared_size_problems(path / "transformer", fix)
    return problems
