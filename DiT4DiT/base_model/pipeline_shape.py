"""The sizes a Cosmos pipeline folder's configs declare, read without loading any weights (standard library only:
the config check reads them before torch loads; the model reads the same)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PipelineShape:
    """What the configs of a pipeline folder say about its sizes, read without loading any weights."""

    hidden_size: int  # transformer width = width of the features the action head attends to
    num_blocks: int  # transformer blocks, the range of framework.cosmos25.extract_layer
    temporal_factor: int  # the VAE encodes 1 + k*temporal_factor frames into 1 + k latent frames


def vae_factors(vae_config: Mapping[str, Any]) -> tuple[int, int]:
    """(temporal, spatial) downsampling of a Wan VAE config, as diffusers' Cosmos pipeline derives them: 1 + k*t
    frames become 1 + k latent frames, s x s pixels one latent."""
    downsample = vae_config.get("temperal_downsample", [False, True, True])
    return 2 ** sum(downsample), 2 ** len(downsample)


def read_pipeline_shape(folder: str | Path) -> PipelineShape:
    path = Path(folder)
    transformer = json.loads((path / "transformer" / "config.json").read_text())
    vae = json.loads((path / "vae" / "config.json").read_text())
    return PipelineShape(
        hidden_size=transformer["num_attention_heads"] * transformer["attention_head_dim"],
        num_blocks=transformer["num_layers"],
        temporal_factor=vae_factors(vae)[0],
    )
