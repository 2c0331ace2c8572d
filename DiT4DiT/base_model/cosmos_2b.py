"""The real nvidia/Cosmos-Predict2.5-2B snapshot (revision diffusers/base/post-trained): its component configs,
sizes and file layout, in one stdlib-only module.

The full-size generator (`python -m DiT4DiT.tools.full_size_cosmos`), bench/bench_model.py, bench/device_check.py,
the memory estimate and its plan read these names, so a size changes in one place. Sources: diffusers'
`scripts/convert_cosmos_to_diffusers.py`, which wrote the snapshot (transformer config "Cosmos-2.5-Predict-Base-2B",
the Wan2.1 VAE of Wan-AI/Wan2.1-T2V-1.3B-Diffusers in float32, the UniPC scheduler, `nvidia/Cosmos-Reason1-7B` as
text encoder, `save_pretrained(..., max_shard_size="5GB")`), and the Qwen2.5-VL-7B configuration that
Cosmos-Reason1-7B fine-tunes. Verify against the downloaded `*/config.json` where it matters.
"""

from __future__ import annotations

from DiT4DiT.facts import DTYPE_BYTES

# transformer/config.json: 2048 wide (16 heads x 128), 28 blocks.
HEADS, HEAD_DIM = 16, 128
HIDDEN_SIZE = HEADS * HEAD_DIM
TRANSFORMER_CONFIG = dict(
    in_channels=17,  # 16 latent channels + the condition mask
    out_channels=16,
    num_attention_heads=HEADS,
    attention_head_dim=HEAD_DIM,
    num_layers=28,
    mlp_ratio=4.0,
    text_embed_dim=1024,
    adaln_lora_dim=256,
    max_size=(128, 240, 240),
    patch_size=(1, 2, 2),
    rope_scale=(1.0, 3.0, 3.0),
    concat_padding_mask=True,
    extra_pos_embed_type=None,
    use_crossattn_projection=True,
    crossattn_proj_in_channels=100352,  # 28 text-encoder layers x 3584, every hidden layer concatenated
    encoder_hidden_states_channels=1024,
)

# text_encoder/config.json (Qwen2_5_VLForConditionalGeneration): the language model and the vision tower.
TEXT_LAYERS, TEXT_HIDDEN = 28, 3584
TEXT_CONFIG = dict(
    vocab_size=152064, hidden_size=TEXT_HIDDEN, intermediate_size=18944, num_hidden_layers=TEXT_LAYERS,
    num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=128000, rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    sliding_window=32768, max_window_layers=28, tie_word_embeddings=False, hidden_act="silu",
    rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
)
VISION_CONFIG = dict(
    depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, patch_size=14,
    spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
    tokens_per_second=2,
)
MAX_SEQUENCE_LENGTH = 512  # prompts are padded / truncated to this many tokens
# Qwen2.5-VL's special tokens, in the order (and so with the ids, from 151643) of its tokenizer.
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
]

# vae/config.json: the Wan2.1 VAE (AutoencoderKLWan), with the latent statistics the pipeline normalises with.
VAE_CONFIG = dict(
    base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
    temperal_downsample=[False, True, True], dropout=0.0,
    latents_mean=[-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
                  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
    latents_std=[2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                 1.6382, 1.1253, 2.8251, 1.916],
)

# scheduler/scheduler_config.json: UniPC over flow sigmas.
SCHEDULER_CONFIG = dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction",
                        sigma_max=200.0, sigma_min=0.01)

# How the weights are stored: dtype per component and the shard size save_pretrained was given.
COMPONENT_DTYPES = {"text_encoder": "bfloat16", "transformer": "bfloat16", "vae": "float32"}
MAX_SHARD_SIZE = "5GB"

# Parameters of the real components (tests/test_full_size_cosmos.py counts them on the meta device).
PARAMETERS = {"transformer": 2_059_174_912, "text_encoder": 8_292_166_656, "vae": 126_892_531}


def prompt_embedding_bytes(dtype: str = "bfloat16", layers: int = TEXT_LAYERS, hidden: int = TEXT_HIDDEN,
                           tokens: int = MAX_SEQUENCE_LENGTH) -> int:
    """One stored prompt embedding: tokens x (layers x hidden) in `dtype` (98 MiB for the 2B snapshot in bf16)."""
    return tokens * layers * hidden * DTYPE_BYTES[dtype]
