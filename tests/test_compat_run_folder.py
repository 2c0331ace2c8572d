"""Run folders both ways: an original-style run folder loads here; our checkpoints export to what the original loads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.typed import plain_values
from DiT4DiT.dataloader import Normalizer
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.framework.base_framework import baseframework
from DiT4DiT.model.framework.DiT4DiT import DiT4DiT
from DiT4DiT.model.framework.share_tools import get_action_stats, read_mode_config, unnormalize_actions
from DiT4DiT.tools.export_checkpoint import export_full_checkpoint
from helpers.fixtures_model import make_examples
from helpers.in_process import call_main
from helpers.original_loading import ORIGINAL_YAMLS, OUR_YAMLS, TINY_MODEL

REPO = Path(__file__).resolve().parents[1]
# What the tiny config freezes, so what its checkpoints leave out (they reload from the base snapshot).
RELOADED_FROM_SNAPSHOT = ("backbone_interface.extractor.text_encoder.", "backbone_interface.extractor.vae.")
# Keys of our resolved config that the original's config tracker never writes (they are ours, or unaccessed).
NOT_IN_ORIGINAL_RUN_CONFIG = ("trackers", "wandb_mode", "framework.cosmos25.prompt_cache",
                              "framework.cosmos25.local_files_only",
                              "datasets.vla_data.cache_dir", "datasets.vla_data.holdout_episodes",
                              "trainer.keep_last_states", "trainer.save_full_state_dict", "trainer.mixed_precision")


def _original_statistics() -> dict:
    """dataset_statistics.json as the original writes it: raw per-dim statistics and a mask, no modes."""
    rng = np.random.default_rng(0)
    low = rng.uniform(-2, -1, 14)
    high = low + rng.uniform(0.5, 2, 14)
    section = {"mean": ((low + high) / 2).tolist(), "std": ((high - low) / 4).tolist(), "max": high.tolist(),
               "min": low.tolist(), "q01": (low + 0.1).tolist(), "q99": (high - 0.1).tolist()}
    mask = [True] * 12 + [False, False]
    return {"new_embodiment": {"action": {**section, "mask": mask}, "state": dict(section),
                               "num_transitions": 300, "num_trajectories": 9}}


def _original_run_config(cfg) -> dict:
    values = plain_values(cfg)
    for dotted in NOT_IN_ORIGINAL_RUN_CONFIG:
        *parents, leaf = dotted.split(".")
        node = values
        for parent in parents:
            node = node[parent]
        del node[leaf]
    values["trainer"]["pretrained_checkpoint"] = None
    return values


@pytest.fixture(scope="module")
def trained(tiny_pipeline_dir):
    """A tiny model whose trainable weights differ from a fresh build's (as after training)."""
    cfg = load_config(REPO / "DiT4DiT/config/tiny/dit4dit_tiny.yaml",
                      [f"framework.cosmos25.base_model={tiny_pipeline_dir}"])
    torch.manual_seed(1)
    model = build_framework(cfg)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith(RELOADED_FROM_SNAPSHOT):
                parameter.add_(0.01 * torch.randn_like(parameter))
    return cfg, model


def _write_run(root: Path, cfg, state: dict, config: dict, name="checkpoints/steps_10_pytorch_model.pt") -> Path:
    (root / "checkpoints").mkdir(parents=True)
    (root / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    (root / "dataset_statistics.json").write_text(json.dumps(_original_statistics()))
    checkpoint = root / name
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, checkpoint)
    return checkpoint


def _assert_same(state_a: dict, state_b: dict) -> None:
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key]), key


def test_an_original_run_folder_loads_through_from_pretrained_and_base_framework(trained, tmp_path):
    cfg, model = trained
    # The original saves accelerator.get_state_dict(model): every weight, frozen modules included.
    checkpoint = _write_run(tmp_path / "run", cfg, model.state_dict(), _original_run_config(cfg))
    config, stats = read_mode_config(checkpoint)
    assert config["framework"]["name"] == "DiT4DiT" and stats == _original_statistics()
    for loaded in (DiT4DiT.from_pretrained(checkpoint), baseframework.from_pretrained(checkpoint)):
        assert isinstance(loaded, DiT4DiT) and loaded.norm_stats == _original_statistics()
        _assert_same(loaded.state_dict(), model.state_dict())


def test_original_action_statistics_unnormalise_as_its_clients_do():
    stats = _original_statistics()
    action = get_action_stats(None, stats)
    assert action is stats["new_embodiment"]["action"] and baseframework.get_action_stats(norm_stats=stats) is action
    with pytest.raises(ValueError, match="it holds \\['new_embodiment'\\]"):
        get_action_stats("franka", stats)
    normalized = np.linspace(-1.2, 1.2, 3 * 14).reshape(3, 14)
    low, high = np.asarray(action["min"]), np.asarray(action["max"])
    # Our Normalizer on the original's file: min_max where the mask keeps the dim (its sim clients), raw elsewhere.
    back = Normalizer.from_statistics(action).unnormalize(normalized)
    np.testing.assert_allclose(back[:, :12], (normalized[:, :12] + 1) / 2 * (high[:12] - low[:12]) + low[:12])
    np.testing.assert_array_equal(back[:, 12:], normalized[:, 12:])
    # The base framework's LIBERO helper: clip, gripper column 6 to 0/1, q01/q99 on masked-in dims.
    libero = unnormalize_actions(normalized, action)
    clipped = np.clip(normalized, -1, 1)
    q01, q99 = np.asarray(action["q01"]), np.asarray(action["q99"])
    np.testing.assert_allclose(libero[:, :6], 0.5 * (clipped[:, :6] + 1) * (q99[:6] - q01[:6]) + q01[:6])
    gripper = np.where(clipped[:, 6] < 0.5, 0.0, 1.0)
    np.testing.assert_allclose(libero[:, 6], 0.5 * (gripper + 1) * (q99[6] - q01[6]) + q01[6])
    np.testing.assert_array_equal(libero[:, 12:], clipped[:, 12:])
    with pytest.raises(Exception, match="names no normalisation modes"):
        Normalizer.from_statistics(stats["new_embodiment"]["state"])


def test_predict_action_without_state_works_as_in_the_original(trained):
    cfg, model = trained
    model.eval()
    examples = make_examples(cfg, batch=2, views=3)
    for example in examples:
        del example["state"]
    torch.manual_seed(0)
    actions = model.predict_action(examples)["normalized_actions"]
    assert actions.shape == (2, 8, 14) and np.isfinite(actions).all()


def test_exported_checkpoint_holds_every_weight_and_loads_strictly_into_a_fresh_model(trained, tmp_path):
    cfg, model = trained
    ours = {k: v for k, v in model.state_dict().items() if not k.startswith(RELOADED_FROM_SNAPSHOT)}
    config = plain_values(cfg)
    checkpoint = _write_run(tmp_path / "run", cfg, ours, config, name="final_model/pytorch_model.pt")
    out = export_full_checkpoint(checkpoint, tmp_path / "exported/full.pt")
    full = torch.load(out, weights_only=True)
    fresh = build_framework(load_config(tmp_path / "run/config.yaml"))
    fresh.load_state_dict(full, strict=True)
    _assert_same(fresh.state_dict(), model.state_dict())
    assert any(k.startswith(RELOADED_FROM_SNAPSHOT) for k in full) and len(full) > len(ours)


def test_export_command_refuses_to_overwrite_and_names_a_missing_run_file(trained, tmp_path):
    from DiT4DiT.tools.export_checkpoint import main

    cfg, model = trained
    checkpoint = _write_run(tmp_path / "run", cfg, model.state_dict(), plain_values(cfg))
    taken = tmp_path / "taken.pt"
    taken.write_bytes(b"keep me")

    def run(*args):
        return call_main(main, list(args), dict(os.environ))

    refused = run(str(checkpoint), "--out", str(taken))
    assert refused.returncode == 2 and "--overwrite" in refused.stderr and taken.read_bytes() == b"keep me"
    (tmp_path / "run/dataset_statistics.json").unlink()
    missing = run(str(checkpoint), "--out", str(tmp_path / "new.pt"))
    assert missing.returncode == 2 and "Missing `dataset_statistics.json`" in missing.stderr
    assert not (tmp_path / "new.pt").exists()


@pytest.mark.parametrize("yaml_name", [*ORIGINAL_YAMLS, *OUR_YAMLS])
def test_the_originals_run_folder_of_each_shipped_yaml_loads_here(yaml_name, tiny_pipeline_dir, tmp_path):
    """The other direction: the folder the original writes for this YAML (its keys as given, read-but-unused ones
    included; every weight) loads through our from_pretrained, strictly."""
    tiny = [o[2:] for o in TINY_MODEL if o.startswith("--framework.")]
    config = OmegaConf.merge(OmegaConf.load(REPO / "DiT4DiT/config" / yaml_name), OmegaConf.from_dotlist(
        [*tiny, f"framework.cosmos25.base_model={tiny_pipeline_dir}", "trainer.pretrained_checkpoint=null"]))
    (tmp_path / "run").mkdir()
    (tmp_path / "run/config.yaml").write_text(OmegaConf.to_yaml(config))
    torch.manual_seed(0)
    model = build_framework(load_config(tmp_path / "run/config.yaml"))
    checkpoint = _write_run(tmp_path / "run", None, model.state_dict(), OmegaConf.to_container(config))
    _assert_same(DiT4DiT.from_pretrained(checkpoint).state_dict(), model.state_dict())


def test_the_originals_constructor_takes_its_omegaconf_config_and_converts_it_once(tiny_pipeline_dir, tmp_path):
    """`DiT4DiT(config)` as the original's code calls it, with the OmegaConf tree it reads from its YAML (unread keys
    and all) or a plain dict: the model converts it once and keeps the typed config, the same one load_config
    gives for that YAML."""
    yaml = REPO / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"
    overrides = [f"framework.cosmos25.base_model={tiny_pipeline_dir}",
                 f"framework.cosmos25.prompt_store_dir={tmp_path / 'prompts'}"]
    original = OmegaConf.merge(OmegaConf.load(yaml), OmegaConf.from_dotlist(overrides))
    typed = load_config(yaml, overrides)
    for config in (original, OmegaConf.to_container(original)):
        model = DiT4DiT(config)
        assert model.config == typed
        with pytest.raises(AttributeError):
            model.config.trainer.max_train_steps = 1  # read-only once loaded, as the tree was
