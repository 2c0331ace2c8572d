"""Write a tiny, randomly initialised Cosmos-Predict2.5 pipeline folder for tests and CPU smoke runs.

    python -m DiT4DiT.tools.tiny_cosmos [--out DIR] [--seed N] [--overwrite]

The folder has the layout of the real `nvidia/Cosmos-Predict2.5-2B` snapshot (model_index.json plus
text_encoder / tokenizer / transformer / vae / scheduler), with the same classes at toy sizes, so it loads
through exactly the same code path. Weights come from a fixed seed; the tokenizer is a byte-level BPE trained
offline on a few built-in sentences, with a chat template that accepts list-of-parts message content.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import TRAINING, require
    require("python -m DiT4DiT.tools.tiny_cosmos", TRAINING)

import torch

from DiT4DiT.errors import run_main
from DiT4DiT.facts import TINY_MODEL_DIR
from DiT4DiT.base_model.cosmos_2b import TRANSFORMER_CONFIG as COSMOS_2B_TRANSFORMER_CONFIG
from DiT4DiT.model.modules.cosmos_pipeline import NoOpSafetyChecker
from DiT4DiT.model.modules.prompt_encoding import SYSTEM_PROMPT
from DiT4DiT.atomic_files import write_marked_folder
from DiT4DiT.host.output_paths import check_out, check_replaceable
from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape

DEFAULT_OUT = Path(TINY_MODEL_DIR)

TEXT_HIDDEN = 32
TEXT_LAYERS = 2
LATENT_CHANNELS = 16
TRANSFORMER_HEADS = 2
TRANSFORMER_HEAD_DIM = 16  # hidden size 32 = the width of the features the action head sees
TRANSFORMER_LAYERS = 4
TOKENIZER_VOCAB = 400

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen's chat layout; message content may be a string or a list of {"type": "text", "text": ...} parts.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOKENIZER_CORPUS = [
    SYSTEM_PROMPT,
    "pick up the red block and place it in the bowl",
    "put the cup on the plate",
    "open the drawer and take out the bottle",
    "stack the green cube on top of the blue cube",
    "move the apple to the left of the basket",
    "grasp the handle with both arms and lift the pot",
    "place the bread into the toaster",
    "press the button, then close the lid",
    "hand over the hammer from the right arm to the left arm",
]


def build_tokenizer(vocab_size: int = TOKENIZER_VOCAB, special_tokens: list[str] = SPECIAL_TOKENS):
    """A byte-level BPE trained offline on TOKENIZER_CORPUS, as a Qwen2 tokenizer with Qwen's chat layout."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes, so any text works
        show_progress=False,
    )
    bpe.train_from_iterator(TOKENIZER_CORPUS, trainer)
    return Qwen2TokenizerFast(
        tokenizer_object=bpe,
        chat_template=CHAT_TEMPLATE,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def build_text_encoder(tokenizer):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    token_id = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_HIDDEN,
            intermediate_size=2 * TEXT_HIDDEN,
            num_hidden_layers=TEXT_LAYERS,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=2048,
            # M-RoPE splits each head's rotary half (16 / 2 = 8 = 2 + 3 + 3) over time, height and width.
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=TEXT_HIDDEN,
            fullatt_block_indexes=[0],
        ),
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
    )
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def build_transformer():
    from diffusers import CosmosTransformer3DModel

    # The 2B model's structure (UPSTREAM_SPEC 2.1) at toy widths: only sizes differ from the real config.
    sizes = dict(
        in_channels=LATENT_CHANNELS + 1,
        out_channels=LATENT_CHANNELS,
        num_attention_heads=TRANSFORMER_HEADS,
        attention_head_dim=TRANSFORMER_HEAD_DIM,
        num_layers=TRANSFORMER_LAYERS,
        mlp_ratio=2.0,
        text_embed_dim=TRANSFORMER_HEADS * TRANSFORMER_HEAD_DIM,
        adaln_lora_dim=8,
        crossattn_proj_in_channels=TEXT_HIDDEN * TEXT_LAYERS,
        encoder_hidden_states_channels=TRANSFORMER_HEADS * TRANSFORMER_HEAD_DIM,
    )
    return CosmosTransformer3DModel(**(COSMOS_2B_TRANSFORMER_CONFIG | sizes)).eval()


def calibration_clips(count: int = 48, frames: int = 5, side: int = 32) -> torch.Tensor:
    """(count, 3, frames, side, side) in [-1, 1]: table-like scenes, a colour gradient with three boxes that drift.

    Drawn from the global generator, so the caller's seed fixes them.
    """
    ramp = torch.linspace(0, 1, side)
    clips = torch.empty(count, 3, frames, side, side)
    for clip in clips:
        top, bottom = torch.rand(2, 3, 1, 1)
        background = top + (bottom - top) * ramp.view(1, side, 1)
        boxes = [(torch.rand(3, 1, 1), torch.randint(0, side - 8, (2,)), torch.randint(4, 12, (2,)),
                  torch.randint(-2, 3, (2,))) for _ in range(3)]
        for t in range(frames):
            frame = background.expand(3, side, side).clone()
            for colour, (y, x), (h, w), (dy, dx) in boxes:
                y0, x0 = (y + dy * t).clamp(0, side - 1), (x + dx * t).clamp(0, side - 1)
                frame[:, y0:y0 + h, x0:x0 + w] = colour
            clip[:, t] = frame * 2 - 1
    return clips


def build_vae():
    from diffusers import AutoencoderKLWan

    # Wan2.1 layout (temporal x4, spatial x8).
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=LATENT_CHANNELS,
        dim_mult=[1, 2, 2, 2],
        num_res_blocks=1,
        attn_scales=[],
        temperal_downsample=[False, True, True],
    ).eval()
    # The model encodes its conditioning frame as a posterior *sample*, as the original does. A trained VAE's
    # posterior is nearly a point; at random init its log-variance is about 0 (std 1), a noise some 60 times the
    # spread of the means, so a tiny model could not see its images at all. Log-variance -20 (std 5e-5) here.
    with torch.no_grad():  # quant_conv's second half of output channels is the log-variance
        vae.quant_conv.weight[LATENT_CHANNELS:] = 0.0
        vae.quant_conv.bias[LATENT_CHANNELS:] = -20.0
        # A trained VAE's latents_mean/std are its latents' per-channel statistics over videos, so normalised
        # latents are about N(0, 1); measured here the same way, on made-up scenes. With made-up statistics
        # instead, Meta-World frames' normalised latents differed by 0.03 from image to image against channel
        # offsets of 0.26, and the model hardly saw its images (issue 21); calibrated, they differ by 0.25.
        latents = vae.encode(calibration_clips()).latent_dist.mode()
    vae.register_to_config(latents_mean=latents.mean((0, 2, 3, 4)).tolist(),
                           latents_std=latents.std((0, 2, 3, 4)).tolist())
    return vae


def build_scheduler():
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(
        use_karras_sigmas=True,
        use_flow_sigmas=True,
        prediction_type="flow_prediction",
        sigma_max=200.0,
        sigma_min=0.01,
    )


def build_tiny_pipeline(seed: int = 0):
    """The tiny Cosmos2_5_PredictBasePipeline in memory, identical for the same seed."""
    from diffusers import Cosmos2_5_PredictBasePipeline

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tokenizer = build_tokenizer()
        text_encoder = build_text_encoder(tokenizer)
        transformer = build_transformer()
        vae = build_vae()
    return Cosmos2_5_PredictBasePipeline(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=build_scheduler(),
        safety_checker=NoOpSafetyChecker(),
    )


def write_folder_atomically(out: str | Path, overwrite: bool, write, tool: str, ours=None) -> Path:
    """`write(staging)` fills a folder that then replaces `out` (write_marked_folder): a failure leaves `out` as it
    was. --overwrite replaces only a folder `tool` wrote (check_replaceable): never a downloaded snapshot."""
    out = Path(out)
    check_out(out, folder=True)
    check_replaceable(out, tool, overwrite=overwrite, ours=ours)
    return write_marked_folder(out, tool, write)


def is_tiny_pipeline(folder: Path) -> bool:
    """A pipeline folder of the tiny sizes: one this tool wrote before it marked its folders."""
    try:
        shape = read_pipeline_shape(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (shape.hidden_size, shape.num_blocks) == (TRANSFORMER_HEADS * TRANSFORMER_HEAD_DIM, TRANSFORMER_LAYERS)


def write_tiny_pipeline(out: str | Path, seed: int = 0, overwrite: bool = False) -> Path:
    """Write the pipeline folder atomically: a failure leaves `out` as it was."""
    from diffusers.utils import logging as diffusers_logging

    def write(staging: Path) -> None:
        pipeline = build_tiny_pipeline(seed)
        verbosity = diffusers_logging.get_verbosity()
        try:
            # The no-op safety checker is deliberately not saved (the real snapshot has none either); keep quiet.
            diffusers_logging.set_verbosity_error()
            pipeline.save_pretrained(staging, safe_serialization=True)
        finally:
            diffusers_logging.set_verbosity(verbosity)

    return write_folder_atomically(out, overwrite, write, "tiny_cosmos", ours=is_tiny_pipeline)


def report_written(tool: str, write, message: str) -> int:
    """A generator's exit status: 0 with `message` once `write()` returns the folder; one line on stderr and the
    error's status (run_main) when something is in the way."""
    return run_main(lambda: print(message.format(out=write())), tool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny random Cosmos-Predict2.5 pipeline folder.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--seed", type=int, default=0, help="weight-initialisation seed (default: 0)")
    # --overwrite, as tiny_dataset; --force is the earlier name.
    parser.add_argument("--overwrite", "--force", dest="overwrite", action="store_true",
                        help="replace an existing, non-empty output folder")
    args = parser.parse_args(argv)
    return report_written("tiny_cosmos", lambda: write_tiny_pipeline(args.out, seed=args.seed, overwrite=args.overwrite),
                          "tiny Cosmos-Predict2.5 pipeline written to {out}")


if __name__ == "__main__":
    sys.exit(main())
