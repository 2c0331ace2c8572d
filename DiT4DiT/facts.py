"""Facts both the torch-free tools (doctor, memory estimate) and the model need, in one stdlib-only module.

Importing it loads nothing heavy, so the doctor and the config loader can use it on a machine whose torch is
broken; the model and data code import the same names, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# The checkout holding this package: relative paths in a launch and the shipped configs are read from it.
REPO = Path(__file__).resolve().parents[1]


def in_repo(path: str | Path) -> Path:
    """`path` as given when absolute, else under the checkout (the launcher runs the trainer in its root)."""
    return Path(path) if Path(path).is_absolute() else REPO / path

# The kinds of device the trainer, the launcher and the policy server run on.
DEVICE_KINDS = ("npu", "cuda", "cpu")
# The base model: nvidia/Cosmos-Predict2.5-2B in diffusers format.
HUB_REPO = "nvidia/Cosmos-Predict2.5-2B"
HUB_REVISION = "diffusers/base/post-trained"
# Where `python -m DiT4DiT.tools.tiny_cosmos` / `tiny_robotwin` write the tiny assets by default (repo-relative).
TINY_MODEL_DIR = "playground/Pretrained_models/Cosmos-Predict2.5-tiny"
TINY_DATA_DIR = "playground/Datasets/robotwin_tiny"
# Component subfolder of a pipeline snapshot -> a file that must be in it (weights may be sharded).
PIPELINE_PARTS = {
    "text_encoder": "config.json",
    "tokenizer": "tokenizer_config.json",
    "transformer": "config.json",
    "vae": "config.json",
    "scheduler": "scheduler_config.json",
}
# Wan VAE: 8x spatial downsampling and 1 + 4k frames -> 1 + k latent frames; Cosmos patches latents 2x2.
VAE_SPATIAL_FACTOR, VAE_TEMPORAL_FACTOR, PATCH_SIZE = 8, 4, 2
FRAME_SIDE_MULTIPLE = VAE_SPATIAL_FACTOR * PATCH_SIZE  # a frame side maps to whole latent patches
# Bytes per element of each framework.cosmos25.torch_dtype: the weights' and the stored prompt embeddings'.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# The backbone's VAE as trainer.freeze_modules names it (frozen: its outputs can be stored, the latent store).
VAE_MODULE = "backbone_interface.extractor.vae"
# The original's future losses that sample the future latents (future_num_inference_steps sampler steps from
# noise, gradient through every step) and compare them with the ground truth's latents, or decode them and compare
# frames (L1 / MSE in [0, 1]); the others are one flow-matching pass.
PIXEL_LOSS_TYPES = ("pixel_l1", "pixel_mse")  # these compare with the video's own pixels
SAMPLED_LOSS_TYPES = ("latent_mse", *PIXEL_LOSS_TYPES)
# The action DiT's size table: (attention heads, head width).
DIT_SIZES = {"DiT-B": (12, 64), "DiT-L": (32, 48)}


# trainer.deterministic: device kind -> variables read when its libraries start (the launcher exports them; the
# trainer sets any still missing before the process group). HCCL reduces in a fixed order with
# HCCL_DETERMINISTIC=true (CANN HCCL guide); cuBLAS needs a fixed workspace (torch's reproducibility notes).
DETERMINISTIC_ENV = {"npu": {"HCCL_DETERMINISTIC": "true"}, "cuda": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}}

def download_command(folder) -> str:
    """The command that puts the base model into `folder`."""
    return f"huggingface-cli download {HUB_REPO} --revision {HUB_REVISION} --local-dir {folder}"


def latent_frame_count(num_frames: int, temporal_factor: int = VAE_TEMPORAL_FACTOR) -> int:
    """The VAE encodes 1 + k*temporal_factor frames into 1 + k latent frames; extra frames are dropped."""
    return (num_frames - 1) // temporal_factor + 1


def vae_clip_frames(num_frames: int, temporal_factor: int = VAE_TEMPORAL_FACTOR) -> int:
    """The frames of a clip the VAE encodes: frame 0 and the whole groups of temporal_factor after it."""
    return 1 + temporal_factor * ((num_frames - 1) // temporal_factor)


AUTO = "auto"  # trainer.gradient_checkpointing_blocks: the fewest the memory plan needs on the device in use


def checkpointed_block_count(blocks: str | None, enable_gradient_checkpointing: bool, layers: int) -> int:
    """How many of the Cosmos transformer's `layers` blocks recompute their activations in the backward pass:
    trainer.gradient_checkpointing_blocks (`blocks`, a count; null: all when trainer.enable_gradient_checkpointing,
    else none). `auto` is resolved to a count before the model is built (the trainer, the memory plan); unresolved
    it counts as all blocks, the least memory."""
    if blocks is None:
        return layers if enable_gradient_checkpointing else 0
    return layers if blocks == AUTO else min(int(blocks), layers)


def module_paths(text: str | None) -> list[str]:
    """Comma-separated dotted module paths (trainer.freeze_modules, trainer.reload_modules) as a list."""
    return [p.strip() for p in str(text or "").split(",") if p.strip()]


def is_under(path: str, prefixes: Iterable[str]) -> bool:
    """Whether dotted `path` is one of the dotted `prefixes` or lies below one ("a.b" is under "a", "ab" is not)."""
    return any(path == prefix or path.startswith(prefix + ".") for prefix in prefixes)
