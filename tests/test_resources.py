"""Resources checked at start-up: a config that cannot fit is refused with the numbers, an expert may override,
too many workers for the cores is a warning; the time-to-finish line."""

from __future__ import annotations

import re

import pytest
import torch

from DiT4DiT.training.resources import ResourceError, check_resources, time_to_finish, usable_cores
from helpers.doctor_runs import TINY_YAML, doctor
from helpers.sections import run_sections

TINY = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


def tiny(pipeline, *overrides):
    return run_sections(TINY, f"framework.cosmos25.base_model={pipeline}", *overrides)


def test_frames_no_machine_can_hold_are_refused_with_the_numbers(tiny_pipeline_dir):
    cfg = tiny(tiny_pipeline_dir, "datasets.vla_data.image_size=16384", "datasets.vla_data.num_workers=2")
    with pytest.raises(ResourceError) as refused:
        check_resources(*cfg, 1, torch.device("cpu"))
    message = str(refused.value)
    assert "host memory: need ~1 process(es) x (" in message
    assert "2 workers x 2 prefetched" in message and "GiB available" in message
    assert "--trainer.ignore_resource_check true" in message and refused.value.exit_code == 2


def test_the_doctor_counts_the_host_memory_the_trainer_refuses(tiny_pipeline_dir, tmp_path, monkeypatch):
    # They once had a rule each: the doctor 1 GiB per data worker, the trainer 0.25 GiB plus the prefetched frames.
    config = tmp_path / "config.yaml"
    config.write_text(TINY_YAML.read_text().replace("num_workers: 1", "num_workers: 3")
                      .replace("image_size: 32", "image_size: 16384"))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    # A device host: on a CPU one the trainer adds the training itself, which the doctor does not count.
    monkeypatch.setattr("DiT4DiT.training.resources.device_total_bytes", lambda device: 2**60)
    with pytest.raises(ResourceError) as refused:
        check_resources(*run_sections(config, f"framework.cosmos25.base_model={tiny_pipeline_dir}"), 2,
                        torch.device("cpu"))
    _, lines = doctor("--config_yaml", str(config), "--base_model", str(tiny_pipeline_dir), "--num_processes", "2")
    need = re.compile(r"2 process\(es\) x \(.*3 workers x 2 prefetched.*\) = [0-9.]+ GiB")
    trainer, doctors = need.search(str(refused.value)), need.search(lines["host_memory"])
    assert trainer and doctors, (str(refused.value), lines["host_memory"])
    assert trainer.group() == doctors.group() and lines["host_memory"].startswith("FAIL")


def test_an_expert_may_start_anyway(tiny_pipeline_dir):
    cfg = tiny(tiny_pipeline_dir, "datasets.vla_data.image_size=16384", "trainer.ignore_resource_check=true")
    warnings = check_resources(*cfg, 1, torch.device("cpu"))
    assert any("host memory" in w and "starting anyway" in w for w in warnings)


def test_the_tiny_run_fits_and_more_workers_than_cores_is_a_warning(tiny_pipeline_dir):
    assert check_resources(*tiny(tiny_pipeline_dir, "datasets.vla_data.num_workers=0"), 1, torch.device("cpu")) == []
    cores = usable_cores()
    warnings = check_resources(*tiny(tiny_pipeline_dir, f"datasets.vla_data.num_workers={cores + 1}"), 1, torch.device("cpu"))
    assert len(warnings) == 1 and f"{cores + 1} data workers for {cores} cores" in warnings[0]


def test_the_first_step_says_how_long_the_run_takes():
    assert time_to_finish(11, 10, 100_010, 2.5) == ("step 11 of 100010 took 2.50 s: the 99999 steps left take about "
                                                   "69 h 26 min at this pace")


def test_auto_recomputes_as_many_blocks_as_the_device_needs(tmp_path, monkeypatch):
    """trainer.gradient_checkpointing_blocks=auto at the 2B sizes (robotwin, batch 4, 3 views): a CPU has no device
    memory to plan for (none); a GPU just large enough for the estimate with 9 blocks recomputed gets 9; one too
    small for all of them gets all 28, and says so."""
    from dataclasses import replace

    from DiT4DiT.memory.estimate import estimate_training_memory
    from DiT4DiT.tools.full_size_cosmos import write_shapes_only
    from DiT4DiT.training import resources

    sizes = write_shapes_only(tmp_path / "shapes")
    framework, trainer, data = run_sections("DiT4DiT/config/robotwin/dit4dit_robotwin.yaml",
                                            f"framework.cosmos25.base_model={sizes}",
                                            "trainer.gradient_checkpointing_blocks=auto")
    assert resources.auto_recomputed_blocks(framework, trainer, data, 16, torch.device("cpu")) == (
        0, "none of 28: on cpu there is no device memory to plan for")
    nine = estimate_training_memory(sizes, framework, replace(trainer, gradient_checkpointing_blocks="9"), data, 16, 3,
                                    device_kind="cuda").total_gib
    monkeypatch.setattr(resources, "device_total_bytes", lambda device: nine / 0.9 * 2**30 * 1.0000001)
    assert resources.auto_recomputed_blocks(framework, trainer, data, 16, torch.device("cuda"))[0] == 9
    monkeypatch.setattr(resources, "device_total_bytes", lambda device: 2**30)
    blocks, why = resources.auto_recomputed_blocks(framework, trainer, data, 16, torch.device("cuda"))
    assert blocks == 28 and why.startswith("all 28, and still over")
