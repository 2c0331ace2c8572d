"""The prompt-embedding store: encoded once per store, reused, keyed by the snapshot, safe against bad files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules
from DiT4DiT.model.modules.prompt_encoding import encode_prompts
from DiT4DiT.model.modules.prompt_store import PromptStore, PromptStoreError
from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline
from helpers.adamw_steps import step_losses
from helpers.cli_runs import run_tree
from helpers.training_runs import rendezvous_port

ROOT = Path(__file__).resolve().parents[1]
FROZEN = "backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae"
INSTRUCTIONS = ["pick up the red block", "open the drawer", "stack the cups"]


def frozen_model(cfg):
    torch.manual_seed(0)
    model = build_framework(cfg)
    freeze_modules(model, FROZEN)
    return model


def count_text_encoder_calls(model) -> list:
    calls = []
    # the language model: the backbone runs it without the lm_head around it
    model.backbone_interface.extractor.text_encoder.model.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_prepare_encodes_each_instruction_once_then_releases_the_text_encoder(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = frozen_model(cfg)
    extractor = model.backbone_interface.extractor
    with torch.no_grad():
        direct = encode_prompts(extractor.text_encoder, extractor.tokenizer, INSTRUCTIONS, 64)
    calls = count_text_encoder_calls(model)
    encoder_tensors = [*extractor.text_encoder.parameters(), *extractor.text_encoder.buffers()]

    report = model.prepare_prompts(INSTRUCTIONS + INSTRUCTIONS[::-1])

    assert (report.instructions, report.encoded, len(calls)) == (3, 3, 1)  # one batch of the three unique ones
    assert report.store_bytes > 3 * 64 * 64 * 4
    assert sorted(p.name for p in report.folder.iterdir()) == sorted(
        extractor.prompt_store.path(p).name for p in INSTRUCTIONS)
    assert extractor.text_encoder is None and all(t.numel() == 0 for t in encoder_tensors)
    stored = extractor.prompt_embeddings(INSTRUCTIONS, torch.device("cpu"))
    assert torch.equal(stored, direct)
    model(tiny_examples(cfg, batch=3))  # trains without the text encoder
    with pytest.raises(PromptStoreError, match="'an unseen instruction' is not in the prompt store"):
        extractor.prompt_embeddings(["an unseen instruction"], torch.device("cpu"))


def test_a_second_start_encodes_nothing(tiny_model_cfg):
    cfg = tiny_model_cfg()
    first = frozen_model(cfg).prepare_prompts(INSTRUCTIONS)
    model = frozen_model(cfg)
    calls = count_text_encoder_calls(model)
    again = model.prepare_prompts(INSTRUCTIONS)
    assert (first.encoded, again.encoded, len(calls)) == (3, 0, 0)
    assert again.folder == first.folder and again.store_bytes == first.store_bytes


def test_the_key_follows_the_snapshot_and_the_max_length(tiny_model_cfg, tiny_pipeline_dir, tmp_path):
    first = frozen_model(tiny_model_cfg()).prepare_prompts(INSTRUCTIONS)
    # A copy of the same snapshot is the same encoder; a snapshot with other weights, or another length, is not.
    copy = shutil.copytree(tiny_pipeline_dir, tmp_path / "copy")
    other = write_tiny_pipeline(tmp_path / "other", seed=1)
    same = frozen_model(tiny_model_cfg(f"framework.cosmos25.base_model={copy}")).prepare_prompts(INSTRUCTIONS)
    changed = frozen_model(tiny_model_cfg(f"framework.cosmos25.base_model={other}")).prepare_prompts(INSTRUCTIONS)
    shorter = frozen_model(tiny_model_cfg("framework.cosmos25.max_sequence_length=32")).prepare_prompts(INSTRUCTIONS)
    assert (same.folder, same.encoded) == (first.folder, 0)
    assert changed.encoded == 3 and shorter.encoded == 3
    assert len({first.folder, changed.folder, shorter.folder}) == 3


@pytest.mark.parametrize("damage", ["truncate", "garbage header", "other instruction"])
def test_a_corrupt_store_file_is_warned_about_and_encoded_again(tiny_model_cfg, damage, caplog):
    cfg = tiny_model_cfg()
    model = frozen_model(cfg)
    store = model.backbone_interface.extractor.prompt_store
    model.prepare_prompts(INSTRUCTIONS)
    expected = torch.stack([store.embedding(p) for p in INSTRUCTIONS])
    victim = store.path(INSTRUCTIONS[1])
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-100])
    elif damage == "garbage header":
        victim.write_bytes(b"\xff" * 8 + victim.read_bytes()[8:])
    else:
        shutil.copyfile(store.path(INSTRUCTIONS[0]), victim)

    again = frozen_model(cfg)
    report = again.prepare_prompts(INSTRUCTIONS)
    assert report.encoded == 1
    assert f"{victim} is corrupt" in caplog.text
    assert torch.equal(again.backbone_interface.extractor.prompt_embeddings(INSTRUCTIONS, torch.device("cpu")), expected)


def test_an_unwritable_store_dir_is_one_error_naming_the_key(tiny_model_cfg, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")  # a folder below a regular file cannot be created, even by root
    model = frozen_model(tiny_model_cfg(f"framework.cosmos25.prompt_store_dir={blocker / 'store'}"))
    with pytest.raises(PromptStoreError) as error:
        model.prepare_prompts(INSTRUCTIONS)
    message = str(error.value)
    assert "\n" not in message and str(blocker / "store") in message
    assert "set framework.cosmos25.prompt_store_dir to a writable folder" in message


@pytest.mark.slow
def test_a_write_that_runs_out_of_room_keeps_no_partial_file(tmp_path):
    """The file-size limit makes the write fail part-way, as a full disk does."""
    script = f"""
import resource, signal, torch
from DiT4DiT.model.modules.prompt_store import PromptStore, PromptStoreError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
store = PromptStore({str(tmp_path / 'store')!r}, "identity", 64, torch.float32)
try:
    store.fill(["a", "b"], lambda prompts: torch.ones(len(prompts), 64, 64))
except PromptStoreError as error:
    print(error)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "nothing partial was kept" in result.stdout and "framework.cosmos25.prompt_store_dir" in result.stdout
    assert [p.name for p in (tmp_path / "store").rglob("*") if p.is_file()] == []
    store = PromptStore(tmp_path / "store", "identity", 64, torch.float32)
    assert store.fill(["a", "b"], lambda prompts: torch.ones(len(prompts), 64, 64)).encoded == 2


def test_store_losses_equal_per_step_encoding_bitwise(tiny_model_cfg, tiny_examples):
    """Three AdamW steps with the store and with prompt_cache=false, same seeds: the same losses, bit for bit."""

    def losses(*overrides) -> list[float]:
        cfg = tiny_model_cfg(*overrides)
        model = frozen_model(cfg)
        examples = tiny_examples(cfg, batch=3)
        model.prepare_prompts([e["lang"] for e in examples])
        return step_losses(model, examples)

    assert losses() == losses("framework.cosmos25.prompt_cache=false")


def launch_fill(store_dir: Path, out: Path, processes: int) -> list[dict]:
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               "DiT4DiT/config/deepseeds/cpu.yaml", "--num_processes", str(processes), *rendezvous_port(processes),
               str(ROOT / "tests" / "workers" / "fill_prompt_store.py"), str(store_dir), str(out)]
    result = run_tree(command, cwd=ROOT, timeout=300,  # a timeout leaves no rank behind
                      env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]


@pytest.mark.slow
def test_two_processes_encode_each_instruction_once_and_reuse_the_store(tmp_path):
    first = launch_fill(tmp_path / "store", tmp_path / "first", processes=2)
    assert [r["rank"] for r in first] == [0, 1]
    by_rank = [set(r["encoded_here"]) for r in first]
    assert by_rank[0] and by_rank[1] and not by_rank[0] & by_rank[1]
    assert sorted(by_rank[0] | by_rank[1]) == first[0]["instructions"]
    assert all(r["report_encoded"] == len(first[0]["instructions"]) for r in first)
    assert first[0]["lookup_sum"] == first[1]["lookup_sum"]

    again = launch_fill(tmp_path / "store", tmp_path / "again", processes=2)
    assert [(r["report_encoded"], r["encoded_here"]) for r in again] == [(0, []), (0, [])]
    assert again[0]["lookup_sum"] == first[0]["lookup_sum"]


def _written_store(tmp_path) -> tuple[PromptStore, Path]:
    store = PromptStore(tmp_path / "store", "encoder-x", 4, torch.bfloat16)
    store.write("pick the cup", torch.arange(12, dtype=torch.float32).reshape(4, 3))
    return store, store.path("pick the cup")


def _other_numbers(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-8:] = torch.full((4,), 7.0, dtype=torch.bfloat16).view(torch.uint8).numpy().tobytes()  # finite, same size
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, words", [
    (_other_numbers, "its sha256 differs from the one it was written with"),
    (lambda path: path.write_bytes(path.read_bytes()[:-6]), "mmap length is greater than file size"),
    (Path.unlink, "No such file or directory"),
], ids=["other finite numbers", "cut short", "deleted"])
def test_an_embedding_changed_after_it_was_checked_stops_the_run(tmp_path, damage, words):
    store, path = _written_store(tmp_path)
    assert store.has("pick the cup")  # located and checked (as at start-up), not mapped yet
    damage(path)
    with pytest.raises(PromptStoreError) as raised:
        store.embedding("pick the cup")
    message = str(raised.value)
    assert message.startswith(f"{path}: the prompt store's embedding of 'pick the cup' changed after it was written")
    assert words in message and "delete the file and start again" in message and "\n" not in message


def test_an_embedding_is_mapped_as_written_and_checked_once(tmp_path):
    store, path = _written_store(tmp_path)
    assert torch.equal(store.embedding("pick the cup").float(), torch.arange(12, dtype=torch.float32).reshape(4, 3))
    assert "pick the cup" in store._verified
    metadata = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])["__metadata__"]
    assert len(metadata["sha256"]) == 64
