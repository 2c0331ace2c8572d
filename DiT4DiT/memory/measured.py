"""The activation rows the memory estimate scales (estimate.py): bytes autograd keeps for backward, measured on the
CPU by `python -m DiT4DiT.tools.measure_activation_memory`, which prints this table. Data only (and its type)."""

from typing import TypedDict

# A measured row: bytes per unit, each key naming the unit (per_video_token, per_sample, ...; per_pass: bytes once).
Row = dict[str, float]


class Measured(TypedDict):
    """MEASURED's keys: three widths the rows were measured at, and the rows (each described at MEASURED)."""

    hidden: int
    text_projection_in: int
    vae_base_dim: int
    video_pass_block: Row
    video_pass_outside: Row
    video_pass_frozen_block: Row
    video_pass_checkpointed_block: Row
    video_pass_checkpointed_outside: Row
    feature_pass_peak: Row
    action_head: Row
    action_head_checkpointed: Row
    vae_encode_peak_per_pixel: Row
    text_encoder_hidden: int
    text_encoder_layer: Row
    text_encoder_outside: Row
    text_encoder_checkpointed_layer: Row
    text_encoder_checkpointed_outside: Row
    vae_encode_saved_per_pixel: Row


# Measured by tools/measure_activation_memory.py (2-core x86_64 CPU, torch 2.7.1, diffusers 0.38.0): bytes per sample in bf16
# autocast with bf16 weights. Cosmos rows: the 2B layout (16 heads x 128 = 2048 wide, MLP 4x, AdaLN-LoRA 256,
# cross-attention to text tokens projected from 28 x 3584), per video token (1,176 for robotwin's 3 views of
# 224 px), per text token (512) and per sample. "block" is one transformer block (scales with the width), "outside"
# is the rest of the model (embeddings, the text projection, the output layer; the 2B layout's). Checkpointed
# blocks keep their input only. The feature pass runs under no_grad: its row is the peak it holds at once.
# The action head: the robotwin head (DiT-B, 16 layers, features 2048 wide, dropout 0.2), per repeated sample, per
# feature token and per action token (the state token included). The VAE: peak per pixel of one frame (views side
# by side) while encoding a sample's 5 frames, or its conditioning frame, with no grad (Wan encodes 4 frames at a
# time, so longer clips hold about the same). Not counted: allocator caching and kernels' workspaces; the NPU's fused
# attention keeps (B, heads, S, 8) float32 softmax statistics where the CPU kernel keeps a (B, heads, S) logsumexp
# (under 0.1% of a block).
MEASURED: Measured = {
    "hidden": 2048,  # the transformer's width: block rows scale with it
    "text_projection_in": 28 * 3584,  # the text projection's input width, bf16, part of the "outside" rows
    "vae_base_dim": 96,  # the Wan2.1 VAE's: the VAE rows scale with it
    "video_pass_block": {"per_video_token": 218956.0, "per_text_token": 24640.0, "per_sample": 0.0, "per_pass": 0},
    "video_pass_outside": {"per_video_token": 26260.0, "per_text_token": 204800.0, "per_sample": -569344.0,
                           "per_pass": 602112},
    # The blocks' weights frozen, what comes before them trained: frozen linear layers save no input.
    "video_pass_frozen_block": {"per_video_token": 164172.0, "per_text_token": 20544.0, "per_sample": 0.0,
                                "per_pass": 0},
    "video_pass_checkpointed_block": {"per_video_token": 4096.0, "per_text_token": 0.0, "per_sample": 0.0,
                                      "per_pass": 0},
    "video_pass_checkpointed_outside": {"per_video_token": 37524.0, "per_text_token": 204800.0, "per_sample": 32768.0,
                                        "per_pass": 0},
    "feature_pass_peak": {"per_video_token": 82948.0, "per_text_token": 2048.0, "per_sample": -604464.0,
                          "per_pass": 604464},
    "action_head": {"per_feature_token": 28672.0, "per_action_token": 588768.0, "per_sample": 54722.0},
    "action_head_checkpointed": {"per_feature_token": 4096.0, "per_action_token": 47200.0, "per_sample": 5570.0},
    "vae_encode_peak_per_pixel": {"video_5_frames": 6629.0, "condition_frame": 1936.3},
    # Trained text encoder (hidden 3584, MLP 18944, 28 heads / 4 KV heads; 1-2 layers built from the config, through
    # embed_token_ids), per prompt token per layer: a part that follows the width and 8 B per MLP unit (the gate and
    # up outputs, their SiLU and product in bf16); "outside": the embedding and the last norm. The S^2 term is the
    # CPU's math attention (its (B, heads, S, S) softmax; NPU and CUDA kernels keep (B, heads, S) statistics).
    # Checkpointed: each layer's bf16 output only. Measured 2026-12-06, 147 s, 4.8 GiB peak RSS.
    "text_encoder_hidden": 3584,
    "text_encoder_layer": {"per_token": 136720.0, "per_token_per_mlp_unit": 8.0, "per_head_per_token_squared_cpu": 4.0,
                           "per_sample": 0.0, "per_pass": 0},
    "text_encoder_outside": {"per_token": 21516.0, "per_head_per_token_squared_cpu": 0.0, "per_sample": 0.0,
                             "per_pass": 0},
    "text_encoder_checkpointed_layer": {"per_token": 7168.0, "per_token_per_mlp_unit": 0.0,
                                        "per_head_per_token_squared_cpu": 0.0, "per_sample": 0.0, "per_pass": 0},
    "text_encoder_checkpointed_outside": {"per_token": 28684.0, "per_head_per_token_squared_cpu": 0.0,
                                          "per_sample": 0.0, "per_pass": 0},
    # Trained VAE: what autograd keeps per pixel (views side by side) of encoding a sample's conditioning frame (the
    # posterior sampled, as clip_encoding.encode_clip does) and a 5-frame clip; the larger of 224 x 224 and 224 x 448.
    "vae_encode_saved_per_pixel": {"condition_frame": 10396.5, "video_5_frames": 39671.3},
}
# NPU only: torch_npu's fused RoPE, which our attention processor calls with q and k cast to float32, saves that
# float32 input for backward in every self-attention: 2 x 4 bytes per hidden unit per video token per block (Ascend
# op-plugin, op_plugin/config/derivatives.yaml: "npu_rotary_mul(Tensor self, Tensor r1, Tensor r2) -> self, r1, r2:
# npu_rotary_mul_backward(grad, self, r1, r2)"; docs/context/torch_npu-npu_rotary_mul.md). On the CPU and CUDA,
# diffusers' RoPE saves only the cos/sin tables that every block shares.
NPU_ROPE_BYTES_PER_TOKEN_PER_HIDDEN = 2 * 4
MEASURED_HEAD = ("DiT-B", 16)  # the action head MEASURED holds: (type, layers)
