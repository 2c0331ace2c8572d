"""The config a run folder records (`<run_dir>/config.yaml`): every value resolved, so the original, which reads a
null as an override, builds the same model from it, and the keys only the original reads with the values in use
here. The OmegaConf form lives here and in schema.py only: the rest of the code reads the typed config.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from DiT4DiT.config.schema import RECORDED_FOR_THE_ORIGINAL, read_config_file
from DiT4DiT.config.typed import plain_values
from DiT4DiT.facts import DIT_SIZES

DIT_CFG = "framework.action_model.diffusion_model_cfg"


def recorded_config(cfg: Any) -> DictConfig:
    """`cfg` (typed, an OmegaConf tree or a mapping) with every value the model computes from a null resolved (the
    DiT size: the original merges `diffusion_model_cfg` over the size table, so a null there replaces 12 heads x 64
    and fails), and the keys only the original reads (RECORDED_FOR_THE_ORIGINAL) with the values in use here."""
    recorded = OmegaConf.create(plain_values(cfg))
    for key, value in RECORDED_FOR_THE_ORIGINAL.items():
        if OmegaConf.select(recorded, key.rsplit(".", 1)[0]) is not None:  # a section the run has (no head, no key)
            OmegaConf.update(recorded, key, value, force_add=True)
    dit = OmegaConf.select(recorded, DIT_CFG)
    if dit is not None and dit.get("num_attention_heads") is None:
        size = OmegaConf.select(recorded, "framework.action_model.action_model_type", default="DiT-B")
        dit.num_attention_heads, dit.attention_head_dim = DIT_SIZES[size]
    return recorded


def recorded_values(cfg: Any) -> dict[str, Any]:
    """recorded_config as a plain nested dict (what resume compares)."""
    return plain_values(recorded_config(cfg))


def recorded_yaml(cfg: Any) -> str:
    """The text of a run folder's config.yaml."""
    return OmegaConf.to_yaml(recorded_config(cfg), resolve=True)


def read_config_values(path: Any, resolve: bool = True) -> dict[str, Any]:
    """A config file (a run folder's config.yaml, ours or the original's, or a YAML as written) as a plain nested
    dict, read with the bounds every config file gets; ${...} references resolved unless `resolve=False`."""
    return plain_values(read_config_file(path), resolve)
