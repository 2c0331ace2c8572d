"""config/recorded.py: the config a run folder records, and reading one back as plain values."""

from __future__ import annotations

from DiT4DiT.config.recorded import recorded_config, recorded_values, recorded_yaml, read_config_values
from DiT4DiT.config.schema import RECORDED_FOR_THE_ORIGINAL
from DiT4DiT.facts import DIT_SIZES


def test_the_record_holds_the_values_in_use_and_the_keys_only_the_original_reads(tiny_model_cfg, tmp_path):
    cfg = tiny_model_cfg("trainer.max_train_steps=7")
    values = recorded_values(cfg)
    assert values["trainer"]["max_train_steps"] == 7
    for key, value in RECORDED_FOR_THE_ORIGINAL.items():
        node = values
        for part in key.split("."):
            node = node[part]
        assert node == value, key
    # The record as config.yaml, read back as the original or a resume reads it: the same values.
    (tmp_path / "config.yaml").write_text(recorded_yaml(cfg))
    assert read_config_values(tmp_path / "config.yaml") == values


def test_a_null_dit_size_is_recorded_as_the_size_in_use(tiny_model_cfg):
    # The original merges diffusion_model_cfg over its size table: a recorded null there would replace the heads.
    cfg = tiny_model_cfg("framework.action_model.diffusion_model_cfg.num_attention_heads=null",
                         "framework.action_model.diffusion_model_cfg.attention_head_dim=null")
    dit = recorded_config(cfg).framework.action_model.diffusion_model_cfg
    size = cfg.framework.action_model.action_model_type
    assert (dit.num_attention_heads, dit.attention_head_dim) == DIT_SIZES[size]
