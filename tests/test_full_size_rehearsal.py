"""bench/full_size_rehearsal.py: every shipped config rehearsed, with the memory estimate for exactly the run it
made. The fast tier trains one config at the test size in this process (libero: it trains the text encoder and the
VAE); the slow tier runs the script's --smoke on all four. The full-width table is docs/full-size.md's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState

from DiT4DiT.config.schema import load_config, normalize_cli_overrides
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.config.typed import section
from DiT4DiT.memory.estimate import estimate_training_memory, mixture_views

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("full_size_rehearsal", ROOT / "bench" / "full_size_rehearsal.py")
rehearsal = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rehearsal)


@pytest.fixture(scope="module")
def test_size_snapshot(tmp_path_factory) -> Path:
    from DiT4DiT.tools.full_size_cosmos import write_full_size_pipeline

    return write_full_size_pipeline(tmp_path_factory.mktemp("cosmos") / "snapshot_test", size="test")


def test_each_config_is_rehearsed_as_shipped_but_for_what_24_gb_needs(tmp_path):
    """The four shipped configs, each frozen only where FIT_24GB says: the configs that train everything keep the
    text encoder and the VAE trained."""
    assert set(rehearsal.CONFIGS) == set(rehearsal.FIT_24GB) == {"robotwin", "libero", "robocasa_gr1", "g1"}
    for name in rehearsal.CONFIGS:
        overrides = normalize_cli_overrides(rehearsal.training_overrides(name, tmp_path, tmp_path, tmp_path))
        trainer = section(load_config(str(ROOT / rehearsal.CONFIGS[name]), overrides), ConfigSections).trainer
        frozen = trainer.freeze_modules.split(",")
        assert rehearsal.BLOCKS in frozen
        assert (rehearsal.TEXT_ENCODER in frozen) == (rehearsal.VAE in frozen) == (name == "robotwin")
    assert rehearsal.config_names(["libero,g1", str(ROOT / rehearsal.CONFIGS["robotwin"])]) == ["libero", "g1", "robotwin"]
    with pytest.raises(SystemExit, match="not a shipped config"):
        rehearsal.config_names(["tiny"])


def test_one_config_trains_its_text_encoder_and_vae_at_the_test_size(test_size_snapshot, tmp_path, one_torch_thread):
    """The rehearsal's libero run, in this process: 2 steps of the config (2 views, 5 frames, its checkpointing) with
    the text encoder and the VAE trained; both end in the final model changed, and the estimate made for exactly
    this run counts their graphs."""
    from DiT4DiT.training.train import main

    data = rehearsal.config_data("libero", tmp_path)
    overrides = [*rehearsal.training_overrides("libero", test_size_snapshot, data, tmp_path), *rehearsal.SMOKE_KEYS,
                 "--trainer.save_interval=2"]
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    assert main(["--config_yaml", str(ROOT / rehearsal.CONFIGS["libero"]), *overrides]) == 0
    final = torch.load(tmp_path / "runs" / "rehearsal_libero" / "final_model" / "pytorch_model.pt", weights_only=True)
    from safetensors.torch import load_file

    # (the module's name, the snapshot's: transformers renames the language model's keys when it loads them)
    for part, name, stored_name in (("text_encoder", "model.language_model.layers.0.self_attn.q_proj.weight",
                                     "model.layers.0.self_attn.q_proj.weight"),
                                    ("vae", "encoder.conv_in.weight", "encoder.conv_in.weight")):
        stored = {k: v for path in (test_size_snapshot / part).glob("*.safetensors") for k, v in load_file(path).items()}
        trained = final[f"backbone_interface.extractor.{part}.{name}"]
        assert not torch.equal(trained.float(), stored[stored_name].float()), part  # it trained
    estimate = rehearsal.run_estimate("libero", test_size_snapshot, data, tmp_path, *rehearsal.SMOKE_KEYS)
    typed = section(load_config(str(ROOT / rehearsal.CONFIGS["libero"]), normalize_cli_overrides(
        [*rehearsal.training_overrides("libero", test_size_snapshot, data, tmp_path), *rehearsal.SMOKE_KEYS])),
        ConfigSections)
    data_section = typed.datasets.vla_data
    assert estimate == estimate_training_memory(test_size_snapshot, typed.framework, typed.trainer, data_section, 1,
                                                mixture_views(data_section.data_mix, data_section.data_config),
                                                zero_stage=0, device_kind="cpu")
    assert estimate.trained_inputs_gib > 0 and typed.trainer.text_encoder_gradient_checkpointing


@pytest.mark.slow
def test_smoke_rehearses_every_shipped_config(tmp_path):
    """`--smoke` on all four configs at the test size, the training phase of each (the other phases are the
    rehearsal's own and run in `make rehearsal REHEARSAL_ARGS=--smoke`): every run trains, and its row holds the
    estimate for that run."""
    result = subprocess.run([sys.executable, "bench/full_size_rehearsal.py", "--smoke", "--phases", "train",
                             "--workdir", str(tmp_path), "--min_available_gib", "0"], cwd=ROOT, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| ") and "| train |" in line]
    assert [row[0].strip() for row in rows] == ["robotwin", "libero", "robocasa_gr1", "g1"]
    assert all(row[2].strip() == "0" and float(row[5].split()[0]) > 0 for row in rows), rows
    # Each config's weights go once its phases are done (four configs' would be 15 GB); its metrics stay.
    runs = sorted((tmp_path / "runs").iterdir())
    assert [run.name for run in runs] == [f"rehearsal_{name}" for name in ("g1", "libero", "robocasa_gr1", "robotwin")]
    assert all((run / "metrics.jsonl").is_file() and not (run / "checkpoints").exists()
               and not (run / "final_model").exists() for run in runs)
