"""base_model/pipeline_shape.py: the sizes a pipeline folder's configs declare, read without its weights."""

from __future__ import annotations

import json

from DiT4DiT.base_model.cosmos_2b import TRANSFORMER_CONFIG, VAE_CONFIG
from DiT4DiT.base_model.pipeline_shape import PipelineShape, read_pipeline_shape


def write_configs(folder, transformer: dict, vae: dict):
    for part, config in (("transformer", transformer), ("vae", vae)):
        (folder / part).mkdir(parents=True)
        (folder / part / "config.json").write_text(json.dumps(config))
    return folder


def test_the_2b_snapshot_is_2048_wide_28_blocks_and_encodes_4_frames_per_latent_frame(tmp_path):
    folder = write_configs(tmp_path / "cosmos", TRANSFORMER_CONFIG, VAE_CONFIG)
    assert read_pipeline_shape(folder) == PipelineShape(hidden_size=2048, num_blocks=28, temporal_factor=4)


def test_the_tiny_pipeline_reads_as_its_configs_say(tiny_pipeline_dir):
    transformer = json.loads((tiny_pipeline_dir / "transformer" / "config.json").read_text())
    shape = read_pipeline_shape(str(tiny_pipeline_dir))
    assert shape.hidden_size == transformer["num_attention_heads"] * transformer["attention_head_dim"] == 32
    assert shape.num_blocks == transformer["num_layers"]


def test_a_vae_without_temporal_downsampling_keeps_every_frame(tmp_path):
    folder = write_configs(tmp_path / "cosmos", {"num_attention_heads": 2, "attention_head_dim": 8, "num_layers": 1},
                           {"temperal_downsample": [False, False, False]})
    assert read_pipeline_shape(folder).temporal_factor == 1
