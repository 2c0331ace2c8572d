"""Every data config of the original, and the original's three YAMLs, train 2 steps on tiny generated data.

In-process through the trainer's own entry (`main`), one process, no launcher: what is checked here is that the
data configs, their sin/cos and raw keys, and the original's config files go through the whole training path.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.mixtures import DATASET_NAMED_MIXTURES
from DiT4DiT.tools.export_checkpoint import export_full_checkpoint
from DiT4DiT.tools.tiny_dataset import generate
from DiT4DiT.training.train import main
from helpers.original_loading import ORIGINAL_YAMLS, OUR_YAMLS, TINY_MODEL, load_as_the_original

pytestmark = pytest.mark.slow  # each test trains two steps in-process (seconds each, fifteen of them)

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"
# The first mixture that names each data config (oxe_droid is named by none, in the original too).
FIRST_MIXTURE = {}
for _name, _entries in DATASET_NAMED_MIXTURES.items():
    for _entry in _entries:
        FIRST_MIXTURE.setdefault(_entry.data_config, _name)
TRAINABLE = sorted(set(FIRST_MIXTURE) & set(DATA_CONFIGS))


def test_every_data_config_but_droid_is_named_by_a_mixture():
    assert set(DATA_CONFIGS) - set(TRAINABLE) == {"oxe_droid"}


def _losses(run_dir: Path) -> list[float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["total_loss"] for r in records if "total_loss" in r]


def _check_run(run_dir: Path, code: int) -> None:
    assert code == 0
    assert (run_dir / "final_model/pytorch_model.pt").is_file()
    losses = _losses(run_dir)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize("data_config", TRAINABLE)
def test_data_config_trains_two_steps(data_config, tiny_pipeline_dir, tmp_path, one_torch_thread):
    mixture = FIRST_MIXTURE[data_config]
    configs = [e.data_config for e in DATASET_NAMED_MIXTURES[mixture]]
    generate(mixture, tmp_path / "data", datasets=configs.index(data_config) + 1, episodes=2, frames=(8, 12))
    window = 49 if data_config == "robotwin50" else 7  # robotwin50 fixes 50-step chunks
    code = main([
        "--config_yaml", TINY_CONFIG, *TINY_MODEL, f"--framework.cosmos25.base_model={tiny_pipeline_dir}",
        f"--datasets.vla_data.data_root_dir={tmp_path / 'data'}", f"--datasets.vla_data.data_mix={mixture}",
        "--datasets.vla_data.max_state_dim=64", "--datasets.vla_data.max_action_dim=32",
        "--framework.action_model.state_dim=64", "--framework.action_model.action_dim=32",
        f"--framework.action_model.future_action_window_size={window}", f"--framework.action_model.action_horizon={window + 1}",
        f"--run_root_dir={tmp_path / 'runs'}", "--run_id=run",
    ])
    _check_run(tmp_path / "runs/run", code)
    stats = json.loads((tmp_path / "runs/run/dataset_statistics.json").read_text())
    assert DATA_CONFIGS[data_config].embodiment_tag in stats


@pytest.mark.parametrize("yaml_name", [*ORIGINAL_YAMLS, *OUR_YAMLS])
def test_shipped_yaml_trains_two_steps_and_its_run_loads_in_the_original(yaml_name, tiny_pipeline_dir, tmp_path,
                                                                          one_torch_thread):
    """The file as it is (2B sizes, flash_attention_2, image_size [224, 224]), the model made tiny; the run folder,
    exported, loads through the original's from_pretrained (tests/helpers/original_loading.py)."""
    from omegaconf import OmegaConf

    config = OmegaConf.load(REPO / "DiT4DiT/config" / yaml_name)
    vla = config.datasets.vla_data
    generate(vla.data_mix, tmp_path / "data", datasets=1, episodes=2, frames=(10, 14))
    code = main([
        "--config_yaml", str(REPO / "DiT4DiT/config" / yaml_name), *TINY_MODEL,
        f"--framework.cosmos25.base_model={tiny_pipeline_dir}", f"--datasets.vla_data.data_root_dir={tmp_path / 'data'}",
        f"--run_root_dir={tmp_path / 'runs'}", "--run_id=run",
    ])
    _check_run(tmp_path / "runs/run", code)
    weights = torch.load(tmp_path / "runs/run/final_model/pytorch_model.pt", weights_only=True)
    assert weights["action_model.action_decoder.layer2.weight"].shape[0] == vla.max_action_dim
    full = export_full_checkpoint(tmp_path / "runs/run/final_model/pytorch_model.pt",
                                  tmp_path / "runs/run/final_model/full_pytorch_model.pt")
    loaded = load_as_the_original(full)
    if loaded is not None:  # the stand-in (the original's own code runs in its own process)
        assert all(torch.equal(loaded.state_dict()[k], w) for k, w in weights.items())
