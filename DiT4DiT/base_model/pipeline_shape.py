"""The sizes a Cosmos pipeline folder's configs declare, read without loading any weights (standard library only:
the config check reads them before torch loads; the model reads the same)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PipelineShape:
    """What the configs of a pipeline folder say about its sizes, read without loading any weights."""

    hidden_size: int  # transformer width = width of the features the action head attends to
    num_blocks: int  # transformer blocks, the range of framework.cosmos25.extract_layer
    temporal_factor: int  # the VAE encodes 1 + k*temporal_factor frames into 1 + k latent frames


def read_pipeline_shape(folder: str | Path) -> PipelineShape:
    path = Path(folder)
    transformer = json.loads((path / "transformer" / "config.json").read_text())
    vae = json.loads((path / "vae" / "config.json").read_text())
    return PipelineShape(
        hidden_size=transformer["num_attention_heads"] * transformer["attention_head_dim"],
        num_blocks=transformer["num_layers"],
        temporal_factor=2 ** sum(vae.get("temperal_downsample", [False, True, True])),
    )
