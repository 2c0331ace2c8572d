"""Load the parts of a local diffusers Cosmos-Predict2.5 pipeline folder that training uses.

The folder is a `Cosmos2_5_PredictBasePipeline` snapshot (`nvidia/Cosmos-Predict2.5-2B`, revision
`diffusers/base/post-trained`) or the tiny one written by `python -m DiT4DiT.tools.tiny_cosmos`; both go
through the same `from_pretrained` call. The pipeline object itself is dropped: only its components are kept.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

class NoOpSafetyChecker:
    """Stands in for cosmos_guardrail's checker, which training never runs (and which is not installed)."""

    def to(self, *args: Any, **kwargs: Any) -> "NoOpSafetyChecker":
        return self

    def check_text_safety(self, prompt: str) -> bool:
        return True

    def check_video_safety(self, frames: Any) -> Any:
        return frames


@dataclass
class CosmosComponents:
    text_encoder: torch.nn.Module
    tokenizer: Any
    transformer: torch.nn.Module
    vae: torch.nn.Module
    scheduler: Any
    latents_mean: torch.Tensor  # (1, z_dim, 1, 1, 1) float32
    latents_std: torch.Tensor  # (1, z_dim, 1, 1, 1) float32, the std itself (diffusers 0.38 meaning)
    vae_scale_factor_temporal: int
    vae_scale_factor_spatial: int


def text_encoder_attention(requested: str) -> str:
    """`requested`, or sdpa (with a one-line notice) for flash_attention_2 where no kernel for it is installed:
    transformers runs it through flash-attn, or through torch_npu's fused attention on Ascend."""
    from transformers.utils import is_flash_attn_2_available, is_torch_npu_available

    if requested == "flash_attention_2" and not (is_flash_attn_2_available() or is_torch_npu_available()):
        warnings.warn("framework.cosmos25.attn_implementation=flash_attention_2: neither flash-attn nor torch_npu is "
                      "installed, so the text encoder uses sdpa", RuntimeWarning, stacklevel=2)
        return "sdpa"
    return requested


def load_cosmos_components(
    folder: str | Path,
    torch_dtype: str,
    attn_implementation: str,
    local_files_only: bool = True,
) -> CosmosComponents:
    """Load text encoder, tokenizer, transformer, VAE and scheduler from a pipeline folder (checked complete by
    DiT4DiT/base_model/pipeline_folder.py when the config loaded)."""
    from diffusers import Cosmos2_5_PredictBasePipeline
    from transformers import Qwen2_5_VLForConditionalGeneration

    path = Path(folder)
    dtype = TORCH_DTYPES[torch_dtype]
    # The text encoder is loaded on its own so that its attention implementation can be chosen (the snapshot's
    # config may ask for flash_attention_2, which Ascend does not have).
    text_encoder = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        path / "text_encoder",
        dtype=dtype,
        attn_implementation=text_encoder_attention(attn_implementation),
        local_files_only=local_files_only,
    )
    pipe = Cosmos2_5_PredictBasePipeline.from_pretrained(
        path,
        text_encoder=text_encoder,
        safety_checker=NoOpSafetyChecker(),
        torch_dtype=dtype,
        local_files_only=local_files_only,
    )
    return CosmosComponents(
        text_encoder=pipe.text_encoder,
        tokenizer=pipe.tokenizer,
        transformer=pipe.transformer,
        vae=pipe.vae,
        scheduler=pipe.scheduler,
        latents_mean=pipe.latents_mean,
        latents_std=pipe.latents_std,
        vae_scale_factor_temporal=pipe.vae_scale_factor_temporal,
        vae_scale_factor_spatial=pipe.vae_scale_factor_spatial,
    )
