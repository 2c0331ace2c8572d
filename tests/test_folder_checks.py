"""Model-folder integrity: every safetensors header is read and its byte length compared with the file size."""

from __future__ import annotations

import shutil
import struct

import pytest

from DiT4DiT.facts import download_command
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems
from DiT4DiT.base_model.safetensors_header import MAX_HEADER_BYTES
from helpers.doctor_runs import TINY_YAML, doctor


@pytest.fixture
def pipeline_copy(tiny_pipeline_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(tiny_pipeline_dir, target)
    return target


def test_a_complete_pipeline_passes(tiny_pipeline_dir):
    assert pipeline_folder_problems(tiny_pipeline_dir) == []


def test_a_truncated_shard_is_named_with_both_sizes(pipeline_copy):
    shard = pipeline_copy / "transformer/diffusion_pytorch_model.safetensors"
    size = shard.stat().st_size
    with open(shard, "r+b") as handle:
        handle.truncate(size - 100)
    assert pipeline_folder_problems(pipeline_copy) == [
        f"{shard}: {size - 100} bytes, but its header describes {size}: an interrupted download or a damaged file; "
        f"fix: delete it, then {download_command(pipeline_copy)}"]


@pytest.mark.parametrize("content, problem", [
    (b"<html>rate limited</html>", "not a safetensors file (header length"),
    (struct.pack("<Q", 5) + b"{oops", "not a safetensors file (unreadable header)"),
    (b"\x01\x02", "too short for a safetensors header"),
])
def test_a_garbage_file_is_named(pipeline_copy, content, problem):
    shard = pipeline_copy / "vae/diffusion_pytorch_model.safetensors"
    shard.write_bytes(content)
    (found,) = pipeline_folder_problems(pipeline_copy)
    assert found.startswith(f"{shard}: ") and problem in found


def test_a_header_length_past_the_formats_limit_is_named_without_reading_it(pipeline_copy):
    shard = pipeline_copy / "vae/diffusion_pytorch_model.safetensors"
    with open(shard, "wb") as handle:
        handle.write(struct.pack("<Q", MAX_HEADER_BYTES + 1))
        handle.truncate(MAX_HEADER_BYTES + 100)  # sparse: the zeros take no disk
    (found,) = pipeline_folder_problems(pipeline_copy)
    assert found.startswith(f"{shard}: not a safetensors file (header length {MAX_HEADER_BYTES + 1} > the format's "
                            f"{MAX_HEADER_BYTES}): an interrupted download")


@pytest.mark.slow
def test_the_doctor_fails_the_base_model_naming_the_file(pipeline_copy):
    shard = pipeline_copy / "text_encoder/model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-8])
    code, lines = doctor("--config_yaml", str(TINY_YAML), "--base_model", str(pipeline_copy))
    assert code != 0
    assert lines["base_model"].startswith("FAIL") and str(shard) in lines["base_model"]


def test_the_preflight_applies_the_trainers_mixture_rule(tmp_path):
    from DiT4DiT.launch.folder_checks import data_root_problems

    (tmp_path / "place_a2b_left/meta").mkdir(parents=True)
    (tmp_path / "place_a2b_left/meta/info.json").write_text("{}")
    assert data_root_problems(tmp_path, "robotwin_task2") == []  # one of two there: trains on it, as the trainer does
    (problem,) = data_root_problems(tmp_path / "place_a2b_left", "robotwin_task2")
    assert problem.startswith("datasets.vla_data.data_mix=robotwin_task2: none of its 2 datasets is under")
    (tmp_path / "place_a2b_right").mkdir()  # there, but not a dataset
    assert data_root_problems(tmp_path, "robotwin_task2") == [
        f"{tmp_path / 'place_a2b_right'}: no meta/info.json (not a LeRobot dataset folder)"]


def test_a_broken_tiny_pipeline_is_rewritten_by_its_generator_named_as_given(tiny_pipeline_dir, tmp_path):
    """The launcher checks a repo-relative folder under the repo and prints the command for the folder as typed."""
    tiny = tmp_path / "playground" / "Cosmos-Predict2.5-tiny"
    shutil.copytree(tiny_pipeline_dir, tiny)
    shutil.rmtree(tiny / "scheduler")
    (problem,) = pipeline_folder_problems("playground/Cosmos-Predict2.5-tiny", relative_to=tmp_path)
    assert problem == ("framework.cosmos25.base_model='playground/Cosmos-Predict2.5-tiny' is incomplete: component "
                       "'scheduler' (scheduler/scheduler_config.json) is missing; fix: python -m DiT4DiT.tools.tiny_cosmos "
                       "--out playground/Cosmos-Predict2.5-tiny --overwrite")
    (missing,) = pipeline_folder_problems("playground/Cosmos-Predict2.5-2B", relative_to=tmp_path)
    assert missing.endswith(f"does not exist; fix: {download_command('playground/Cosmos-Predict2.5-2B')} (or, for a smoke "
                            "run, the tiny one: python -m DiT4DiT.tools.tiny_cosmos --out playground/Cosmos-Predict2.5-2B)")


def test_a_run_folder_whose_base_model_is_incomplete_is_named_before_any_model_is_built(pipeline_copy, tmp_path):
    """from_pretrained (the server, export, the original's clients) reloads the frozen modules from the base model."""
    import torch

    from DiT4DiT.model.framework.base_framework import RunFolderError, baseframework

    shutil.rmtree(pipeline_copy / "vae")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"framework:\n  cosmos25:\n    base_model: {pipeline_copy}\n")
    (run / "dataset_statistics.json").write_text("{}")
    torch.save({}, run / "checkpoints" / "steps_1_pytorch_model.pt")
    with pytest.raises(RunFolderError) as error:
        baseframework.from_pretrained(run / "checkpoints" / "steps_1_pytorch_model.pt")
    assert str(error.value) == (f"{run / 'config.yaml'}: framework.cosmos25.base_model='{pipeline_copy}' is incomplete: "
                                f"component 'vae' (vae/config.json) is missing; fix: {download_command(pipeline_copy)}")
    assert error.value.exit_code == 2
