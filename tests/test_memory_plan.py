"""The memory plan (DiT4DiT/memory/plan.py): whether a run fits, and the smallest change that does, on the
real 2B sizes (a shapes-only snapshot: real headers, no weights); through the doctor (fake npu-smi) and the
launcher's preflight (in-process, made-up machines)."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

import pytest

from DiT4DiT.errors import UsageError
from DiT4DiT.memory import plan as memory_plan
from DiT4DiT.memory.estimate import estimate_training_memory
from DiT4DiT.launch import options, plan as planning
from DiT4DiT.launch.host_kind import Host
from DiT4DiT.tools.full_size_cosmos import write_shapes_only
from helpers.doctor_runs import ROOT, doctor
from helpers.sections import run_sections as sections

ROBOTWIN = ROOT / memory_plan.ORIGINAL_CONFIGS["robotwin"]
LIBERO = ROOT / memory_plan.ORIGINAL_CONFIGS["libero"]
A3 = Host("npu", 16, 16, "a3", "npu-smi lists 16 devices (A3, detected)")
FAKE_NVIDIA = ROOT / "tests" / "fakes" / "nvidia_bin"


@pytest.fixture(scope="module")
def real_sizes(tmp_path_factory):
    return write_shapes_only(tmp_path_factory.mktemp("cosmos") / "shapes")


def test_zero3_and_checkpointing_lower_the_estimate(real_sizes):
    framework, trainer, data = sections(LIBERO, "trainer.enable_gradient_checkpointing=false")
    two, three = (estimate_training_memory(real_sizes, framework, trainer, data, 16, 2, zero_stage=z) for z in (2, 3))
    assert three.static_gib < two.static_gib and three.activation_gib == two.activation_gib
    on = estimate_training_memory(real_sizes, framework, replace(trainer, enable_gradient_checkpointing=True), data,
                                  16, 2)
    # the transformer's and the head's part; the text encoder's and the VAE's graphs are not theirs to shrink
    assert on.trained_inputs_gib == two.trained_inputs_gib > 0 and on.static_gib == two.static_gib
    assert on.activation_gib - on.trained_inputs_gib < (two.activation_gib - two.trained_inputs_gib) / 5
    ddp = estimate_training_memory(real_sizes, framework, trainer, data, 16, 2, zero_stage=0)  # nothing shared without DeepSpeed
    assert ddp.static_gib > two.static_gib


def test_fitting_run_has_no_options(real_sizes):
    result = memory_plan.plan(real_sizes, *sections(ROBOTWIN), memory_plan.Run(16), 3, free_gib=60.7)
    assert result.fits and result.options == [] and result.lines()[0].startswith("fits as is: need ~")


def test_each_kind_of_change_is_a_line_with_numbers_and_flags(real_sizes):
    # batch 4, 3 views, no checkpointing
    result = memory_plan.plan(real_sizes, *sections(ROBOTWIN), memory_plan.Run(16), 3, free_gib=35.0)
    assert not result.fits
    changes = {o.flags[0].split("=")[0]: o for o in result.options}
    assert set(changes) == {"--trainer.enable_gradient_checkpointing", "--per_device_batch_size", "--launch_config",
                            "--num_processes"}
    batch = changes["--per_device_batch_size"]
    smaller, steps = (int(f.split("=")[1]) for f in batch.flags)
    assert smaller * steps == 4 and f"global batch {4 * 16} kept" in batch.change  # the global batch is kept
    assert result.best.flags == ["--trainer.enable_gradient_checkpointing=true"]  # the cheapest kind that fits
    assert all(o.estimate.total_gib <= 0.9 * 35.0 for o in result.options if o.fits)
    lines = result.lines()
    assert lines[0].startswith("does not fit: need ~") and "31.5 GiB usable (90% of 35.0 GiB free)" in lines[0]
    assert lines[-1] == "smallest change that fits: activation checkpointing on: --trainer.enable_gradient_checkpointing=true"


def test_changes_are_stacked_when_none_fits_alone(real_sizes):
    # trains everything, text encoder included, at batch 16; its YAML's checkpointing off
    result = memory_plan.plan(real_sizes, *sections(LIBERO, "trainer.enable_gradient_checkpointing=false"),
                              memory_plan.Run(2), 2, free_gib=60.7)
    best = result.best
    assert best is not None and " + " in best.change
    assert "--trainer.enable_gradient_checkpointing=true" in best.flags and "--num_processes=16" in best.flags
    assert not any(o.fits for o in result.options[:4])  # no single change was enough


def test_launch_config_gives_the_zero_stage():
    assert memory_plan.launch_zero_stage("DiT4DiT/config/deepseeds/deepspeed_zero2.yaml") == 2
    assert memory_plan.launch_zero_stage(memory_plan.ZERO3_LAUNCH_CONFIG) == 3
    assert memory_plan.launch_zero_stage("DiT4DiT/config/deepseeds/cpu.yaml") == 0
    assert memory_plan.launch_run(memory_plan.ZERO2_OFFLOAD_LAUNCH_CONFIG, 16, 2) == memory_plan.Run(16, 2, 2, True)
    assert memory_plan.launch_run(memory_plan.ZERO2_LAUNCH_CONFIG, 8) == memory_plan.Run(8, 1, 2, False)


def test_the_offload_preset_is_zero2_with_the_optimizer_in_host_memory():
    import json

    zero2, offload = (json.loads((ROOT / "DiT4DiT/config/deepseeds" / name).read_text())
                      for name in ("ds_zero2.json", "ds_zero2_offload.json"))
    assert offload["zero_optimization"].pop("offload_optimizer") == {"device": "cpu", "pin_memory": True}
    # the trainer's own AdamW steps the host's partition (DeepSpeed would otherwise insist on its compiled CPU Adam)
    assert offload.pop("zero_force_ds_cpu_optimizer") is False
    assert offload == zero2


def test_the_devices_offer_what_the_runtime_reports():
    """An A3 die and an A2 device: 64 GB of HBM, of which torch_npu reports 61.27 / 60.96 GiB as total capacity;
    the plan keeps its 10% of that."""
    assert memory_plan.DEVICES["a3"].memory_gib == 61.27 and memory_plan.DEVICES["a2"].memory_gib == 60.96
    assert memory_plan.HEADROOM * memory_plan.DEVICES["a3"].memory_gib == pytest.approx(55.1, abs=0.05)


def test_a_config_that_trains_the_text_encoder_gets_its_changes_and_the_experiment_one_last(real_sizes):
    """LIBERO as shipped on 16 A3 dies: the text encoder's layers checkpointed and the offloaded optimizer are
    changes of the run (the latter with its host memory); freezing the text encoder changes the experiment: listed
    last, labelled, never stacked and never the smallest change while a change of the run fits."""
    result = memory_plan.plan(real_sizes, *sections(LIBERO), memory_plan.Run(16), 2,
                              free_gib=memory_plan.DEVICES["a3"].memory_gib)
    assert not result.fits
    flags = [o.flags[0] for o in result.options]
    assert "--trainer.text_encoder_gradient_checkpointing=true" in flags
    offload = next(o for o in result.options if o.flags == [f"--launch_config={memory_plan.ZERO2_OFFLOAD_LAUNCH_CONFIG}"])
    assert offload.estimate.host_offload_gib > 0
    assert any(f"GiB of host memory per process)  --launch_config={memory_plan.ZERO2_OFFLOAD_LAUNCH_CONFIG}" in line
               for line in result.lines())
    last = result.options[-1]
    assert last.changes_experiment and last.change.startswith("CHANGES THE EXPERIMENT: the text encoder frozen")
    assert last.flags == ["--trainer.freeze_modules=backbone_interface.extractor.text_encoder"]
    assert [o for o in result.options if o.changes_experiment] == [last]
    assert result.best is not None and not result.best.changes_experiment
    assert result.lines()[-1].startswith("smallest change that fits: ")


def test_when_only_the_experiment_change_fits_the_plan_says_so(real_sizes):
    """No change of the run fits: the frozen text encoder is offered as a change of the experiment, never as the
    smallest change; a config that freezes it already gets no such line."""
    current = estimate_training_memory(real_sizes, *sections(LIBERO), 16, 2)
    smaller = replace(current, static_gib=1.0, activation_gib=1.0)
    result = memory_plan.Plan(35.0, current, False, [
        memory_plan.Option("ZeRO-3 (weights and gradients sharded too)", ["--launch_config=z3"], current, False),
        memory_plan.Option("CHANGES THE EXPERIMENT: the text encoder frozen", ["--trainer.freeze_modules=te"], smaller,
                           True, changes_experiment=True)])
    assert result.best is None and result.experiment_change.fits
    assert result.lines()[-1] == ("no change of the run fits; one of the experiment does: CHANGES THE EXPERIMENT: the "
                                  "text encoder frozen: --trainer.freeze_modules=te")
    robotwin = memory_plan.plan(real_sizes, *sections(ROBOTWIN), memory_plan.Run(16), 3, free_gib=35.0)
    assert robotwin.experiment_change is None  # robotwin freezes the text encoder already


def test_gpu_free_memory_comes_from_nvidia_smi(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE_NVIDIA}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FREE_MIB", "81000 40960")
    assert memory_plan.device_free_gib("cuda") == 40.0  # the fullest GPU decides


def test_fits_table_covers_every_config_and_device(real_sizes):
    configs = {name: ROOT / path for name, path in memory_plan.ORIGINAL_CONFIGS.items()}
    rows = memory_plan.fits_table(real_sizes, configs)
    assert len(rows) == 2 + 4 + 3 and all(row.count("|") == len(memory_plan.DEVICES) + 2 for row in rows)
    for row in rows[2:]:
        assert all(cell.strip().startswith(("fits as is", "fits with", "does not fit")) for cell in row.split("|")[2:-1])


def test_fits_table_of_a_snapshot_without_safetensors_names_the_folder(real_sizes, tmp_path):
    # .bin weights pass the snapshot's folder checks; the table then raised AttributeError on plan()'s None.
    snapshot = tmp_path / "bin_weights"
    shutil.copytree(real_sizes, snapshot)
    for weights in (snapshot / "vae").glob("*.safetensors"):
        weights.rename(weights.with_suffix(".bin"))
    configs = {name: ROOT / path for name, path in memory_plan.ORIGINAL_CONFIGS.items()}
    with pytest.raises(UsageError, match=f"{snapshot}: no \\*.safetensors in text_encoder, transformer, vae"):
        memory_plan.fits_table(snapshot, configs)


@pytest.mark.slow
def test_doctor_names_the_smallest_change(real_sizes):
    args = ("--config_yaml", str(ROBOTWIN), "--base_model", str(real_sizes), "--num_processes", "16")
    _, fits = doctor(*args, layout="a3")
    assert fits["device_memory"].startswith("PASS") and "fits as is" in fits["device_memory"]
    _, tight = doctor(*args, "--device_memory_gib", "35", layout="a3")
    assert tight["device_memory"].startswith("FAIL")
    assert tight["device_memory"].endswith("-> fix: activation checkpointing on: --trainer.enable_gradient_checkpointing=true")


def test_preflight_refuses_a_run_that_does_not_fit(real_sizes, tmp_path):
    facts = planning.Facts(env={}, detect=lambda device, soc: A3, package_lib=lambda name: None,
                           device_free_gib=lambda host: 60.7)
    argv = [f"--base_model={real_sizes}", f"--data_root_dir={tmp_path}", "--dry-run"]
    fits = planning.build(options.parse(argv, tmp_path), facts)
    assert fits.memory[0].startswith("fits as is") and not any("device memory" in p for p in fits.problems)
    assert "memory: fits as is" in planning.dry_run(fits)
    tight = planning.build(options.parse(argv + ["--device_memory_gib=35"], tmp_path), facts)
    problem = next(p for p in tight.problems if p.startswith("device memory: does not fit"))
    assert "smallest change that fits: activation checkpointing on: --trainer.enable_gradient_checkpointing=true" in problem
    with pytest.raises(options.UsageError, match="--device_memory_gib=lots"):
        options.parse(["--device_memory_gib=lots"], tmp_path)


def test_auto_is_the_fewest_recomputed_blocks_that_fit(real_sizes):
    """trainer.gradient_checkpointing_blocks=auto on 16 A3 dies: the fewest of the 28 blocks whose estimate fits
    90% of the die; one fewer does not fit, and the plan of an auto run resolves it so."""
    framework, trainer, data = sections(ROBOTWIN, "trainer.gradient_checkpointing_blocks=auto")
    limit = memory_plan.HEADROOM * 35.0
    blocks = memory_plan.fewest_recomputed_blocks(real_sizes, framework, trainer, data, 16, 3, limit)
    assert 0 < blocks < 28

    def need(count: int) -> float:
        return estimate_training_memory(real_sizes, framework, replace(trainer, gradient_checkpointing_blocks=str(count)),
                                        data, 16, 3).total_gib

    assert need(blocks) <= limit < need(blocks - 1)
    result = memory_plan.plan(real_sizes, framework, trainer, data, memory_plan.Run(16), 3, free_gib=35.0)
    assert result.fits and result.current.total_gib == pytest.approx(need(blocks))
    assert memory_plan.fewest_recomputed_blocks(real_sizes, framework, trainer, data, 16, 3, 1.0) is None
