"""What the prompt-embedding and latent stores will need: their size, free disk, and the latent store's build.

    python -m DiT4DiT.doctor.store_estimate CONFIG_YAML BASE_MODEL [PROCESSES DEVICE]   -> one JSON line

The prompt store holds one embedding per unique instruction of the mixture: max_sequence_length tokens x
(text-encoder layers x hidden size) in the pipeline dtype (512 x 28 x 3584 x 2 B = 98 MiB for the 2B snapshot).
The latent store (framework.cosmos25.latent_cache) holds one clip per step of every episode of the mixture: the VAE
mean of its latent frames and the conditioning frame's std, z_dim x (image_size / 8) x (width / 8) each, in the
pipeline dtype (robotwin: 16 x 28 x 84 x 2 B x 3 = 221 KiB per step). Its build encodes every clip once: the
VAE's FLOPs over the processes at an assumed share of the device's peak (the fill prints the measured pace after
its first episode). Reads metadata only and never imports torch, so the doctor calls it in its own process (a
probe process cost 5 s).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.paths import store_root
from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkCosmos25Section
from DiT4DiT.dataloader.modality import mixture_configs
from DiT4DiT.dataloader.layout import is_dataset
from DiT4DiT.dataloader.mixtures import resolve_data_mix
from DiT4DiT.dataloader.reader import DatasetLayout
from DiT4DiT.doctor.step_flops import planned_peak_tflops
from DiT4DiT.facts import DTYPE_BYTES, VAE_SPATIAL_FACTOR, latent_frame_count, vae_clip_frames


def unique_instructions(vla: DatasetsVlaDataSection) -> tuple[int, int]:
    """(unique task strings over the mixture's datasets found under data_root_dir, datasets found)."""
    root = Path(vla.data_root_dir or ".").expanduser()
    tasks: set[str] = set()
    found = 0
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


# Measured with torch.utils.flop_counter (bf16, the Wan2.1 VAE of Cosmos-Predict2.5-2B, base_dim 96, 224 x 672
# frames): encoding a clip costs 6.66 MFLOP per pixel of its first frame and 5.02 per pixel of each further one
# (1.00 TFLOP for the frame alone, 4.01 for 5 frames); convolutions grow with base_dim squared.
VAE_ENCODE_FLOPS = {"first_frame_per_pixel": 6.657e6, "further_frame_per_pixel": 5.02e6, "base_dim": 96}
# The device kinds the build's pace is given for, as the time plan's devices (their bf16 dense peaks in step_flops),
# and the share of that peak the VAE's 3-D convolutions are assumed to sustain while the store builds (an
# assumption until a device check measures it: 3-D convolution is the slowest kind of work on an Ascend die).
DEVICE_KINDS = {"a3": "A3 die", "a2": "A2", "cuda": "H200"}
ASSUMED_VAE_SHARE_OF_PEAK = 0.25
ROW_METADATA_BYTES = 68  # each row's sha256 in its file's metadata (hex and JSON quoting)


def mixture_steps(vla: DatasetsVlaDataSection) -> tuple[int, int, int]:
    """(steps over every episode of the mixture's datasets found under data_root_dir, episodes, datasets found)."""
    root = Path(vla.data_root_dir or ".").expanduser()
    steps = episodes = found = 0
    for entry in resolve_data_mix(vla.data_mix, vla.data_config):
        if is_dataset(root / entry.dataset):
            lengths = DatasetLayout(root / entry.dataset).episodes
            steps, episodes, found = steps + sum(lengths.values()), episodes + len(lengths), found + 1
    return steps, episodes, found


def latent_store_estimate(cosmos: FrameworkCosmos25Section, vla: DatasetsVlaDataSection, base_model: Path,
                          processes: int, device: str) -> dict:
    """The latent store of this run: clips, bytes per clip and in all, and its build (VAE FLOPs; hours on
    `processes` devices of kind `device`: a3, a2 or cuda)."""
    vae = json.loads((base_model / "vae" / "config.json").read_text())
    frames = vla.num_frames
    configs = mixture_configs(vla.data_mix, vla.data_config)
    views = max(len(c.video_keys) for c in configs)
    as_frames = vla.views == "as_frames" or (vla.views == "auto" and views > 1 and configs[0].views == "as_frames")
    side = vla.image_size // VAE_SPATIAL_FACTOR
    width = side * (1 if as_frames else views)
    latent_frames = latent_frame_count(frames) if cosmos.training != "action" else 1
    clip_bytes = (int(vae.get("z_dim", 16)) * side * width * (latent_frames + 1) * DTYPE_BYTES[cosmos.torch_dtype]
                  + ROW_METADATA_BYTES)
    steps, episodes, datasets = mixture_steps(vla)
    encoded_frames = (views if as_frames else 1) * frames if cosmos.training != "action" else 1
    used = vae_clip_frames(encoded_frames)
    pixels = vla.image_size * vla.image_size * (1 if as_frames else views)
    scale = (int(vae.get("base_dim", VAE_ENCODE_FLOPS["base_dim"])) / VAE_ENCODE_FLOPS["base_dim"]) ** 2
    clip_flops = pixels * scale * (VAE_ENCODE_FLOPS["first_frame_per_pixel"]
                                   + (used - 1) * VAE_ENCODE_FLOPS["further_frame_per_pixel"])
    peak = planned_peak_tflops(DEVICE_KINDS.get(device, DEVICE_KINDS["a3"]))
    rate = peak * 1e12 * ASSUMED_VAE_SHARE_OF_PEAK * max(processes, 1)
    folder = store_root("latent", cosmos.latent_store_dir, vla.cache_dir)
    return {"clips": steps, "episodes": episodes, "datasets": datasets, "clip_bytes": clip_bytes,
            "store_bytes": steps * clip_bytes, "stored_bytes": stored_bytes(folder), "store_dir": str(folder),
            "free_bytes": free_bytes(folder), "clip_tflop": clip_flops / 1e12,
            "build_hours": steps * clip_flops / rate / 3600, "processes": processes, "device": device,
            "latent_cache": cosmos.latent_cache}


def stored_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.safetensors")) if folder.is_dir() else 0


def free_bytes(folder: Path) -> int:
    """Free space on the filesystem that will hold `folder` (its nearest existing parent)."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    return shutil.disk_usage(existing).free


def estimate(config_yaml: str, base_model: str, processes: int = 1, device: str = "a3") -> dict:
    cfg = load_config(config_yaml, [f"framework.cosmos25.base_model={base_model}"])
    cosmos, vla = cfg.framework.cosmos25, cfg.datasets.vla_data
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
        "latent": latent_store_estimate(cosmos, vla, Path(base_model), processes, device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.doctor.store_estimate",
                                     description="the prompt and latent stores' estimate, one JSON line")
    parser.add_argument("config_yaml")
    parser.add_argument("base_model")
    parser.add_argument("processes", nargs="?", type=int, help="processes of the job")
    parser.add_argument("device", nargs="?", help="a3, a2 or cuda: the latent store build's pace")
    args = parser.parse_args(argv)
    given = {name: value for name in ("processes", "device") if (value := getattr(args, name)) is not None}
    print(json.dumps(estimate(args.config_yaml, args.base_model, **given)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
