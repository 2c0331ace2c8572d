"""Full-size modules on the meta device: parameter names, shapes and counts derived by hand.

The counts are worked out below from the layer sizes in UPSTREAM_SPEC 2.1 and 3.2, not read back from
the code, so a wrong width, a missing bias or a renamed module fails here.
"""

from __future__ import annotations

import pytest
import torch

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import FrameworkActionModelSection
from DiT4DiT.config.typed import section
from DiT4DiT.model.modules.action_model.flow_matching_head import build_action_head
from DiT4DiT.base_model.cosmos_2b import TRANSFORMER_CONFIG as COSMOS_2B_TRANSFORMER_CONFIG


def linear(fan_in: int, fan_out: int, bias: bool = True) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


ROBOCASA_HEAD = [
    "framework.action_model.action_model_type=DiT-B",
    "framework.action_model.hidden_size=2560",
    "framework.action_model.action_dim=32",
    "framework.action_model.state_dim=64",
    "framework.action_model.future_action_window_size=15",
    "framework.action_model.action_horizon=16",
    "framework.action_model.diffusion_model_cfg.num_layers=16",
    "framework.action_model.diffusion_model_cfg.output_dim=2560",
    "framework.action_model.diffusion_model_cfg.cross_attention_dim=2048",
]


@pytest.fixture(scope="module")
def dit_b_head():
    cfg = load_config(None, ROBOCASA_HEAD)
    with torch.device("meta"):
        return build_action_head(section(cfg.framework.action_model, FrameworkActionModelSection), feature_dim=2048)


def test_dit_b_head_parameter_count(dit_b_head):
    width, hidden, layers = 768, 2560, 16  # DiT-B: 12 heads x 64
    state_encoder = linear(64, hidden) + linear(hidden, width)
    action_encoder = linear(32, width) + linear(2 * width, width) + linear(width, width)
    position_embedding = 1024 * width
    timestep_encoder = linear(256, width) + linear(width, width)
    block_common = linear(width, 2 * width) + linear(width, 4 * width) + linear(4 * width, width)  # AdaLN + FF
    cross_block = block_common + 2 * linear(width, width) + 2 * linear(2048, width)  # q, out; k, v from features
    self_block = block_common + 4 * linear(width, width)
    dit = timestep_encoder + layers // 2 * (cross_block + self_block) + linear(width, 2 * width) + linear(width, hidden)
    action_decoder = linear(hidden, hidden) + linear(hidden, 32)

    assert dit == 151_922_176
    assert sum(p.numel() for p in dit_b_head.model.parameters()) == dit
    total = state_encoder + action_encoder + position_embedding + dit + action_decoder
    assert total == 163_276_320
    assert sum(p.numel() for p in dit_b_head.parameters()) == total


def test_dit_b_head_names_and_shapes_match_the_original(dit_b_head):
    shapes = {name: tuple(p.shape) for name, p in dit_b_head.state_dict().items()}
    expected = {
        "state_encoder.layer1.weight": (2560, 64),
        "state_encoder.layer2.weight": (768, 2560),
        "action_encoder.layer1.weight": (768, 32),
        "action_encoder.layer2.weight": (768, 1536),
        "action_encoder.layer3.weight": (768, 768),
        "position_embedding.weight": (1024, 768),
        "model.timestep_encoder.timestep_embedder.linear_1.weight": (768, 256),
        "model.timestep_encoder.timestep_embedder.linear_2.weight": (768, 768),
        "model.transformer_blocks.0.norm1.linear.weight": (1536, 768),
        "model.transformer_blocks.0.attn1.to_q.weight": (768, 768),
        "model.transformer_blocks.0.attn1.to_k.weight": (768, 2048),
        "model.transformer_blocks.0.attn1.to_v.weight": (768, 2048),
        "model.transformer_blocks.0.attn1.to_out.0.weight": (768, 768),
        "model.transformer_blocks.0.ff.net.0.proj.weight": (3072, 768),
        "model.transformer_blocks.0.ff.net.2.weight": (768, 3072),
        "model.transformer_blocks.1.attn1.to_k.weight": (768, 768),
        "model.transformer_blocks.15.attn1.to_v.weight": (768, 768),
        "model.proj_out_1.weight": (1536, 768),
        "model.proj_out_2.weight": (2560, 768),
        "action_decoder.layer1.weight": (2560, 2560),
        "action_decoder.layer2.weight": (32, 2560),
    }
    for name, shape in expected.items():
        assert shapes[name] == shape, name
    # Every parameter belongs to one of the original's module families, and nothing else exists.
    per_block = {
        "norm1.linear", "attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "ff.net.0.proj", "ff.net.2",
    }
    families = {
        "state_encoder.layer1", "state_encoder.layer2", "action_encoder.layer1", "action_encoder.layer2",
        "action_encoder.layer3", "model.timestep_encoder.timestep_embedder.linear_1",
        "model.timestep_encoder.timestep_embedder.linear_2", "model.proj_out_1", "model.proj_out_2",
        "action_decoder.layer1", "action_decoder.layer2",
    } | {f"model.transformer_blocks.{i}.{p}" for i in range(16) for p in per_block}
    expected_keys = {f"{f}.{kind}" for f in families for kind in ("weight", "bias")} | {"position_embedding.weight"}
    assert set(shapes) == expected_keys


def test_cosmos_2b_transformer_parameter_count():
    from diffusers import CosmosTransformer3DModel

    with torch.device("meta"):
        transformer = CosmosTransformer3DModel(**COSMOS_2B_TRANSFORMER_CONFIG)
    width, lora, text = 2048, 256, 1024
    patch_embed = linear(18 * 4, width, bias=False)  # 16 latent + condition mask + padding mask, 1x2x2 patches
    time_embed = linear(width, width, False) + linear(width, 3 * width, False) + width  # + RMSNorm weight
    ada_norm_zero = linear(width, lora, False) + linear(lora, 3 * width, False)
    qk_norms = 2 * 128
    self_attention = 4 * linear(width, width, False) + qk_norms
    cross_attention = 2 * linear(width, width, False) + 2 * linear(text, width, False) + qk_norms
    feed_forward = linear(width, 4 * width, False) + linear(4 * width, width, False)
    block = 3 * ada_norm_zero + self_attention + cross_attention + feed_forward
    norm_out = linear(width, lora, False) + linear(lora, 2 * width, False)
    proj_out = linear(width, 1 * 2 * 2 * 16, False)
    crossattn_proj = linear(100352, text)
    total = patch_embed + time_embed + 28 * block + norm_out + proj_out + crossattn_proj

    assert total == 2_059_174_912
    assert sum(p.numel() for p in transformer.parameters()) == total
    assert transformer.config.num_attention_heads * transformer.config.attention_head_dim == 2048
    assert len(transformer.transformer_blocks) == 28
