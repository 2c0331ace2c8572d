"""The full-size snapshot generator (DiT4DiT/tools/full_size_cosmos.py): its configs are the real ones, and a
folder it writes (at test size: the same keys, small widths) passes the folder check and the doctor and loads
through the code that loads the real snapshot."""

from __future__ import annotations

import json

import pytest
import torch

from DiT4DiT.base_model import cosmos_2b
from DiT4DiT.memory.estimate import safetensors_param_count
from DiT4DiT.model.modules.cosmos_pipeline import load_cosmos_components
from DiT4DiT.model.modules.prompt_encoding import encode_prompts
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems
from DiT4DiT.tools import full_size_cosmos as tool
from DiT4DiT.tools.tiny_cosmos import build_tokenizer
from helpers.doctor_runs import TINY_YAML, doctor


@pytest.fixture(scope="module")
def test_size_folder(tmp_path_factory):
    return tool.write_full_size_pipeline(tmp_path_factory.mktemp("cosmos") / "Cosmos-Predict2.5-2B-random", size="test")


def test_full_size_keeps_the_real_shapes_and_thins_only_mlp_vocabulary_and_vision():
    config = tool.text_encoder_config(tool.FULL, build_tokenizer(tool.TOKENIZER_VOCAB, cosmos_2b.SPECIAL_TOKENS))
    text = config.text_config
    assert (text.num_hidden_layers, text.hidden_size) == (28, 3584)
    assert (text.num_attention_heads, text.num_key_value_heads) == (28, 4)
    # transformers rewrites these two on load: rope_scaling's type, and sliding_window to None when unused.
    differs = {k for k, v in cosmos_2b.TEXT_CONFIG.items()
               if getattr(text, k) != v and k not in ("rope_scaling", "sliding_window")}
    assert differs == {"intermediate_size", "vocab_size"}
    assert config.vision_config.depth == 1 and config.vision_config.out_hidden_size == 3584
    assert tool.FULL.transformer == {} and tool.FULL.vae == {}  # the 2B transformer and the Wan2.1 VAE as they are
    assert cosmos_2b.prompt_embedding_bytes() == 98 * 2**20


def test_real_parameter_counts_match_the_classes():
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    with torch.device("meta"):
        modules = {"transformer": CosmosTransformer3DModel(**cosmos_2b.TRANSFORMER_CONFIG),
                   "vae": AutoencoderKLWan(**cosmos_2b.VAE_CONFIG),
                   "text_encoder": Qwen2_5_VLForConditionalGeneration(
                       Qwen2_5_VLConfig(text_config=cosmos_2b.TEXT_CONFIG, vision_config=cosmos_2b.VISION_CONFIG))}
    assert {k: sum(p.numel() for p in m.parameters()) for k, m in modules.items()} == cosmos_2b.PARAMETERS
    assert {k: tool.real_shard_count(k) for k in modules} == {"transformer": 1, "vae": 1, "text_encoder": 4}


def test_written_folder_has_the_real_layout(test_size_folder):
    assert pipeline_folder_problems(test_size_folder) == []
    index = json.loads((test_size_folder / "model_index.json").read_text())
    assert index["_class_name"] == "Cosmos2_5_PredictBasePipeline" and index["text_encoder"][1] == "Qwen2_5_VLForConditionalGeneration"
    transformer = json.loads((test_size_folder / "transformer" / "config.json").read_text())
    assert set(cosmos_2b.TRANSFORMER_CONFIG) <= set(transformer) and transformer["rope_scale"] == [1.0, 3.0, 3.0]
    vae = json.loads((test_size_folder / "vae" / "config.json").read_text())
    assert vae["latents_mean"] == cosmos_2b.VAE_CONFIG["latents_mean"] and vae["z_dim"] == 16
    scheduler = json.loads((test_size_folder / "scheduler" / "scheduler_config.json").read_text())
    assert {k: scheduler[k] for k in cosmos_2b.SCHEDULER_CONFIG} == cosmos_2b.SCHEDULER_CONFIG
    shards = json.loads((test_size_folder / "text_encoder" / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(shards.values())) >= 4 and all((test_size_folder / "text_encoder" / s).is_file() for s in shards.values())
    for part in ("text_encoder", "transformer"):
        header_len = int.from_bytes(next((test_size_folder / part).glob("*.safetensors")).read_bytes()[:8], "little")
        header = json.loads(next((test_size_folder / part).glob("*.safetensors")).read_bytes()[8:8 + header_len])
        assert {t["dtype"] for k, t in header.items() if k != "__metadata__"} == {"BF16"}


def test_written_folder_loads_through_the_real_loader_and_encodes_prompts(test_size_folder):
    parts = load_cosmos_components(test_size_folder, "bfloat16", "sdpa")
    assert type(parts.text_encoder).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert parts.latents_mean.flatten().tolist() == pytest.approx(cosmos_2b.VAE_CONFIG["latents_mean"])
    with torch.no_grad():
        embedding = encode_prompts(parts.text_encoder, parts.tokenizer, ["pick up the cup"], 512)
    assert embedding.shape == (1, 512, 2 * 64) and embedding.dtype == torch.bfloat16


@pytest.mark.slow
def test_doctor_passes_the_written_folder(test_size_folder):
    code, lines = doctor("--config_yaml", str(TINY_YAML), "--base_model", str(test_size_folder),
                         "--device_memory_gib", "60")
    assert lines["base_model"].startswith("PASS"), lines["base_model"]
    assert lines["device_memory"].startswith("PASS") and "fits as is" in lines["device_memory"]


def test_shapes_only_folder_has_the_real_sizes_on_no_disk(tmp_path):
    folder = tool.write_shapes_only(tmp_path / "shapes")
    assert pipeline_folder_problems(folder) == []
    assert {p: safetensors_param_count(folder / p) for p in cosmos_2b.PARAMETERS} == cosmos_2b.PARAMETERS
    text = next((folder / "text_encoder").glob("*.safetensors")).stat()
    assert text.st_size > 16e9 and text.st_blocks * 512 < 2**20  # a sparse file


def test_existing_folder_is_kept_without_overwrite(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    assert tool.main(["--out", str(tmp_path / "out"), "--size", "test"]) == 2
    assert "--overwrite" in capsys.readouterr().err and (tmp_path / "out" / "keep").read_text() == "x"



def test_overwrite_never_deletes_a_folder_the_tool_did_not_write(tmp_path, capsys):
    # --overwrite deleted any folder holding model_index.json (a real downloaded snapshot) and wrote random
    # weights in its place.
    snapshot = tmp_path / "Cosmos-Predict2.5-2B"
    (snapshot / "transformer").mkdir(parents=True)
    (snapshot / "model_index.json").write_text('{"_class_name": "Cosmos2_5_PredictBasePipeline"}')
    (snapshot / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"downloaded weights")
    assert tool.main(["--out", str(snapshot), "--size", "test", "--overwrite"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (f"--out {snapshot} holds 2 entries (model_index.json, transformer) but no .written_by naming "
            "full_size_cosmos: not a folder this tool wrote, so --overwrite will not delete it; give another --out or "
            "delete it yourself") in line  # what is there, and the fix
    assert (snapshot / "transformer" / "diffusion_pytorch_model.safetensors").read_bytes() == b"downloaded weights"


def test_the_folder_it_writes_names_the_tool(test_size_folder):
    assert (test_size_folder / ".written_by").read_text() == "full_size_cosmos\n"
