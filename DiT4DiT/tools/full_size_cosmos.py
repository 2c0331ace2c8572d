"""Write a random-weight Cosmos-Predict2.5-2B pipeline folder in the real snapshot's diffusers layout.

    python -m DiT4DiT.tools.full_size_cosmos --out DIR [--seed N] [--overwrite] [--size full|test]

The configs are the real ones (DiT4DiT/base_model/cosmos_2b.py): the 2B transformer, the Wan2.1 VAE with its latents_mean/std,
the UniPC scheduler, a Qwen2.5-VL text encoder with 28 layers of width 3584, so a prompt embedding has its real
shape (512 x 28 x 3584). Weights are stored as the real snapshot stores them: bf16 text encoder and transformer,
fp32 VAE, each component in as many safetensors shards as the real one (with its index file where it has one).
The tokenizer is a byte-level BPE with Qwen's special tokens and chat layout, trained offline (no hub).

Thinner than the real text encoder, so that the folder, the training state and a server fit a 24 GB host
(THIN_TEXT, THIN_VISION, the tokenizer): the MLP (intermediate_size 256 instead of 18944), the vocabulary (the
offline tokenizer's 447 tokens instead of 152,064) and the vision tower (1 block of width 64 instead of 32 of
1280). None of them changes a shape training sees: the prompt embedding is every layer's hidden state (28 x 3584,
set by the layers and the width), prompts never carry images, and token ids only index the embedding table.
0.90B parameters instead of 8.29B; its attention (28 heads, 4 key/value heads, M-RoPE 16/24/24) and norms are
the real ones.

`--size test` keeps every config key but shrinks the widths (a folder of about 2 MB, written in seconds), so a
unit test can load what this tool writes through the same code as the real snapshot.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from DiT4DiT.base_model import cosmos_2b
from DiT4DiT.base_model.cosmos_2b import COMPONENT_DTYPES, PARAMETERS, SPECIAL_TOKENS
from DiT4DiT.facts import DTYPE_BYTES
from DiT4DiT.base_model.pipeline_folder import PIPELINE_CLASS
from DiT4DiT.base_model.safetensors_header import TensorEntry
from DiT4DiT.tools.tiny_cosmos import build_tokenizer, report_written, write_folder_atomically

DEFAULT_OUT = Path("playground/Pretrained_models/Cosmos-Predict2.5-2B-random")
THIN_TEXT = dict(intermediate_size=256)  # vocab_size: the tokenizer's
THIN_VISION = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, fullatt_block_indexes=[0])
TOKENIZER_VOCAB = 2048
TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
MODEL_INDEX = {  # component -> (library, class), as Cosmos2_5_PredictBasePipeline.save_pretrained writes them
    "safety_checker": [None, None],
    "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
    "tokenizer": ["transformers", "Qwen2TokenizerFast"],
    "transformer": ["diffusers", "CosmosTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLWan"],
}


@dataclass(frozen=True)
class Sizes:
    """Overrides of the real configs (cosmos_2b.py), per component."""

    transformer: dict = field(default_factory=dict)
    text: dict = field(default_factory=dict)
    vision: dict = field(default_factory=dict)
    vae: dict = field(default_factory=dict)


FULL = Sizes(text=THIN_TEXT, vision=THIN_VISION)
_TEST_TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=32, rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]})
TEST = Sizes(
    transformer=dict(num_attention_heads=2, attention_head_dim=16, num_layers=4, text_embed_dim=32, adaln_lora_dim=8,
                     crossattn_proj_in_channels=2 * 64, encoder_hidden_states_channels=32),
    text={**THIN_TEXT, **_TEST_TEXT},
    vision=dict(THIN_VISION, hidden_size=16, intermediate_size=32, out_hidden_size=64),
    vae=dict(base_dim=8, dim_mult=[1, 2, 2, 2], num_res_blocks=1),
)
# bench/bench_step_work.py's `large`: bench_model's --deep transformer (12 blocks, 16 heads x 64 = 1024 wide) with the
# real VAE and prompt width, so the per-step work outside the transformer is the full size's.
LARGE = Sizes(transformer=dict(num_attention_heads=16, attention_head_dim=64, num_layers=12), text=THIN_TEXT,
              vision=THIN_VISION)
SIZES = {"full": FULL, "large": LARGE, "test": TEST}


def real_shard_count(part: str) -> int:
    """Safetensors files of a component in the real snapshot: save_pretrained's shards of at most 5 GB."""
    size = PARAMETERS[part] * DTYPE_BYTES[COMPONENT_DTYPES[part]]
    return math.ceil(size / (int(cosmos_2b.MAX_SHARD_SIZE.removesuffix("GB")) * 10**9))


def shard_size(module: torch.nn.Module, part: str) -> int:
    """The shard size that splits `module` into as many files as the real component has."""
    size = sum(p.numel() * p.element_size() for p in module.state_dict().values())
    shards = real_shard_count(part)
    # save_pretrained packs whole tensors, so a few percent of slack keeps the count from rising by one.
    return size + 1 if shards == 1 else math.ceil(size / shards * 1.05)


def text_encoder_config(sizes: Sizes, tokenizer):
    from transformers import Qwen2_5_VLConfig

    token_id = tokenizer.convert_tokens_to_ids
    text = {**cosmos_2b.TEXT_CONFIG, "vocab_size": len(tokenizer), **sizes.text}
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config={**cosmos_2b.VISION_CONFIG, "out_hidden_size": text["hidden_size"], **sizes.vision},
        image_token_id=token_id("<|image_pad|>"), video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"), vision_end_token_id=token_id("<|vision_end|>"),
        bos_token_id=token_id("<|endoftext|>"), eos_token_id=token_id("<|im_end|>"),
        torch_dtype=COMPONENT_DTYPES["text_encoder"], tie_word_embeddings=False,
    )


def _built(part: str, make):
    """`make()` with parameters created directly in the component's stored dtype (no float32 copy of 2B)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(TORCH_DTYPES[COMPONENT_DTYPES[part]])
    try:
        return make().eval()
    finally:
        torch.set_default_dtype(default)


def _save(module, folder: Path, part: str) -> None:
    module.save_pretrained(folder / part, safe_serialization=True, max_shard_size=shard_size(module, part))


def write_shared_parts(out: Path, tokenizer) -> None:
    """The tokenizer, the scheduler and model_index.json (as Cosmos2_5_PredictBasePipeline.save_pretrained)."""
    import diffusers
    from diffusers import UniPCMultistepScheduler

    tokenizer.save_pretrained(out / "tokenizer")
    UniPCMultistepScheduler(**cosmos_2b.SCHEDULER_CONFIG).save_pretrained(out / "scheduler")
    index = {"_class_name": PIPELINE_CLASS, "_diffusers_version": diffusers.__version__, **MODEL_INDEX}
    (out / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")


def write_components(out: Path, sizes: Sizes) -> None:
    """Each component built, saved and dropped in turn, so the peak is the largest one, not all of them."""
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel
    from transformers import Qwen2_5_VLForConditionalGeneration

    tokenizer = build_tokenizer(TOKENIZER_VOCAB, SPECIAL_TOKENS)
    write_shared_parts(out, tokenizer)
    config = text_encoder_config(sizes, tokenizer)
    _save(_built("text_encoder", lambda: Qwen2_5_VLForConditionalGeneration(config)), out, "text_encoder")
    transformer_config = {**cosmos_2b.TRANSFORMER_CONFIG, **sizes.transformer}
    _save(_built("transformer", lambda: CosmosTransformer3DModel(**transformer_config)), out, "transformer")
    _save(_built("vae", lambda: AutoencoderKLWan(**{**cosmos_2b.VAE_CONFIG, **sizes.vae})), out, "vae")


SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32"}


def write_shapes_file(path: Path, tensors: dict[str, tuple[torch.dtype, tuple[int, ...]]]) -> None:
    """A safetensors file with these tensors' header and no data written: the data is a hole in a sparse file
    (reads as zeros, takes no disk), so its size is the real one and every header check passes."""
    entries: dict[str, TensorEntry] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        entries[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps({"__metadata__": {"format": "pt"}, **entries}).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little") + encoded)
        handle.truncate(8 + len(encoded) + offset)


def write_shapes_only(out: str | Path) -> Path:
    """The real snapshot's configs, real text encoder included, with weight files that hold only their headers:
    what the memory estimate, its plan and the doctor read, for the real sizes, in a second and no disk."""
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel
    from transformers import Qwen2_5_VLForConditionalGeneration

    out = Path(out)
    real = Sizes(text={"vocab_size": cosmos_2b.TEXT_CONFIG["vocab_size"]})
    tokenizer = build_tokenizer(TOKENIZER_VOCAB, SPECIAL_TOKENS)
    with torch.device("meta"):
        modules = {
            "text_encoder": Qwen2_5_VLForConditionalGeneration(text_encoder_config(real, tokenizer)),
            "transformer": CosmosTransformer3DModel(**cosmos_2b.TRANSFORMER_CONFIG),
            "vae": AutoencoderKLWan(**cosmos_2b.VAE_CONFIG),
        }
    write_shared_parts(out, tokenizer)
    for part, module in modules.items():
        if part == "text_encoder":
            module.config.save_pretrained(out / part)
        else:
            module.save_config(out / part)
        dtype = TORCH_DTYPES[COMPONENT_DTYPES[part]]
        name = "model.safetensors" if part == "text_encoder" else "diffusion_pytorch_model.safetensors"
        write_shapes_file(out / part / name, {k: (dtype, tuple(v.shape)) for k, v in module.state_dict().items()})
    return out


def write_full_size_pipeline(out: str | Path, size: str = "full", seed: int = 0, overwrite: bool = False) -> Path:
    """Write the folder atomically: a failure leaves `out` as it was."""
    def write(staging: Path) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            write_components(staging, SIZES[size])

    return write_folder_atomically(out, overwrite, write, "full_size_cosmos")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a random-weight Cosmos-Predict2.5-2B pipeline folder.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="full: the real sizes, thin text encoder (about 6 GB on disk); large: 12 transformer blocks "
                             "of 1024 (the rest full); test: every width shrunk")
    parser.add_argument("--seed", type=int, default=0, help="weight-initialisation seed (default: 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing, non-empty output folder")
    args = parser.parse_args(argv)
    return report_written(
        "full_size_cosmos", lambda: write_full_size_pipeline(args.out, args.size, args.seed, args.overwrite),
        f"random-weight Cosmos-Predict2.5-2B pipeline ({args.size} size) written to {{out}}")


if __name__ == "__main__":
    sys.exit(main())
