"""Run folders both ways, and actions in robot units.

- Ours in the original's tools: config.yaml holds no null the original reads as an override, and with
  trainer.save_full_state_dict the original's loading path (its keys, a strict load_state_dict on a freshly
  built model) reads our run folder and predicts what our server predicts.
- The original's in ours: a LIBERO run folder whose config.yaml lacks max_state_dim / max_action_dim serves,
  and its actions are the original's client formula applied to its normalised actions.
- Units: one reply per data config family (LIBERO, GR1, RoboTwin) against the run's statistics.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from DiT4DiT.config.schema import leaves, load_config
from DiT4DiT.dataloader import save_dataset_statistics
from DiT4DiT.facts import DIT_SIZES
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.framework.base_framework import RunFolderError, recorded_config
from DiT4DiT.serving.client import PolicyClient
from DiT4DiT.serving.policy import Policy
from DiT4DiT.serving.server import running_server
from DiT4DiT.tools.tiny_dataset import generate
from DiT4DiT.training.checkpoint import original_server_note
from DiT4DiT.training.train import main as train_main
from helpers.fixtures_data import dataset_of

REPO = Path(__file__).resolve().parents[1]
TINY_YAML = REPO / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"
# Keys whose null the original reads with the same meaning (disabled / none / its own default), and keys the
# original never reads; any other null in a recorded config would be read by the original as an override.
NULL_MEANS_THE_SAME = {
    "wandb_entity", "wandb_mode", "framework.cosmos25.prompt_store_dir", "datasets.vla_data.cache_dir",
    "framework.cosmos25.flow_matching.high_sigma_ratio", "framework.cosmos25.flow_matching.high_sigma_min",
    "framework.action_model.diffusion_model_cfg.positional_embeddings", "trainer.pretrained_checkpoint",
    "trainer.reload_modules", "trainer.freeze_modules",
    "trainer.closed_loop_eval.python",  # ours alone (the default: this checkout's .venv-metaworld); the original reads no closed_loop_eval
    "trainer.closed_loop_eval.device_id",  # ours alone (the default: the first device training leaves free)
    # ours alone (the original reads none of them): the latent store's folder, checkpointing's block count, profiling
    "framework.cosmos25.latent_store_dir", "trainer.gradient_checkpointing_blocks", "trainer.profile_steps",
}
# The tiny model, at the widths the data configs need (padded to these).
TINY_MODEL = [
    "framework.cosmos25.torch_dtype=float32", "framework.cosmos25.extract_layer=2",
    "framework.cosmos25.max_sequence_length=64", "framework.cosmos25.vl_hidden_dim=32",
    "framework.action_model.hidden_size=64", "framework.action_model.diffusion_model_cfg.cross_attention_dim=32",
    "framework.action_model.diffusion_model_cfg.num_layers=2", "framework.action_model.diffusion_model_cfg.output_dim=64",
    "framework.action_model.diffusion_model_cfg.num_attention_heads=2",
    "framework.action_model.diffusion_model_cfg.attention_head_dim=16", "datasets.vla_data.image_size=32",
    "trainer.freeze_modules=backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae",
    "trainer.mixed_precision=no",
]


def _original_dit_kwargs(config: dict) -> dict:
    """The original's rule: diffusion_model_cfg merged over the size table's entry, later keys winning."""
    head = config["framework"]["action_model"]
    heads, head_dim = DIT_SIZES[head["action_model_type"]]
    table = {"input_embedding_dim": heads * head_dim, "num_attention_heads": heads, "attention_head_dim": head_dim}
    return {**table, **head["diffusion_model_cfg"]}


@pytest.mark.parametrize("yaml_name", ["libero/dit4dit_libero.yaml", "robotwin/dit4dit_robotwin.yaml",
                                       "tiny/dit4dit_tiny.yaml"])
def test_a_recorded_config_holds_no_null_the_original_would_read_as_an_override(yaml_name, tmp_path):
    cfg = load_config(REPO / "DiT4DiT/config" / yaml_name)
    recorded = OmegaConf.to_container(OmegaConf.create(OmegaConf.to_yaml(recorded_config(cfg))))
    nulls = {key for key, value in leaves(recorded) if value is None}
    assert nulls <= NULL_MEANS_THE_SAME, nulls - NULL_MEANS_THE_SAME
    dit = _original_dit_kwargs(recorded)
    assert all(isinstance(dit[k], int) for k in ("num_attention_heads", "attention_head_dim"))
    expected = DIT_SIZES[cfg.framework.action_model.action_model_type]
    if cfg.framework.action_model.diffusion_model_cfg.num_attention_heads is not None:
        expected = (cfg.framework.action_model.diffusion_model_cfg.num_attention_heads,
                    cfg.framework.action_model.diffusion_model_cfg.attention_head_dim)
    assert (dit["num_attention_heads"], dit["attention_head_dim"]) == expected
    # Recording changes no value: the recorded file loads back to the same config.
    path = tmp_path / "config.yaml"
    path.write_text(OmegaConf.to_yaml(recorded_config(cfg)))
    assert OmegaConf.to_container(recorded_config(load_config(path))) == recorded


def _one_request(run_dir: Path, checkpoint: Path, examples: list[dict]) -> dict:
    """One reply of our server (over the wire) for a checkpoint of `run_dir`."""
    policy = Policy.load(checkpoint, torch.device("cpu"), max_batch=4)
    torch.manual_seed(0)
    with running_server(policy) as server, PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
        return client.infer(examples)


def _example(size: int, views: int, state_dim: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"image": [rng.integers(0, 256, (size, size * views, 3), dtype=np.uint8)], "lang": "place the bottle",
            "state": rng.uniform(-1, 1, (1, state_dim)).astype(np.float32)}


@pytest.mark.slow
def test_our_run_with_full_state_dicts_loads_in_the_original_loading_path_and_predicts_as_our_server(
        tiny_pipeline_dir, tiny_robotwin_root, tmp_path, one_torch_thread, capsys):
    code = train_main(["--config_yaml", str(TINY_YAML), f"--framework.cosmos25.base_model={tiny_pipeline_dir}",
                       f"--datasets.vla_data.data_root_dir={tiny_robotwin_root}", f"--run_root_dir={tmp_path}",
                       "--run_id=ours", "--trackers=[jsonl]", "--trainer.save_full_state_dict=true",
                       "--trainer.max_train_steps=2", "--trainer.save_interval=2", "--trainer.eval_interval=2",
                       f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}", "--datasets.vla_data.num_workers=0"])
    assert code == 0
    run_dir = tmp_path / "ours"
    checkpoint = run_dir / "final_model/pytorch_model.pt"
    assert f"{checkpoint} holds every weight: the original's server loads it as it is" in capsys.readouterr().err
    # The original's from_pretrained: config.yaml as it is, pretrained_checkpoint unset, the framework built from
    # it, then torch.load and a strict load_state_dict.
    config = OmegaConf.load(run_dir / "config.yaml")
    config.trainer.pretrained_checkpoint = None
    assert _original_dit_kwargs(OmegaConf.to_container(config))["num_attention_heads"] == 2
    fresh = build_framework(load_config(run_dir / "config.yaml"))
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    fresh.load_state_dict(state, strict=True)
    fresh.norm_stats = json.loads((run_dir / "dataset_statistics.json").read_text())
    fresh.eval()
    example = _example(32, 3, 14)
    torch.manual_seed(0)
    theirs = fresh.predict_action([dict(example, image=[example["image"][0].copy()])])["normalized_actions"]
    ours = _one_request(run_dir, checkpoint, [example])
    np.testing.assert_allclose(ours["normalized_actions"], theirs, atol=1e-6)


def test_a_run_without_full_state_dicts_ends_with_the_export_command(tmp_path):
    cfg = load_config(TINY_YAML)
    note = original_server_note(cfg.trainer.save_full_state_dict, tmp_path / "run")
    final = tmp_path / "run/final_model/pytorch_model.pt"
    assert note.endswith(f"python -m DiT4DiT.tools.export_checkpoint {final} --out {final.parent / 'full_pytorch_model.pt'}")


def _original_statistics_libero() -> dict:
    """dataset_statistics.json as the original writes it for LIBERO: 7 action dims (gripper masked out), 8 state."""
    rng = np.random.default_rng(3)

    def section(width):
        low = rng.uniform(-1, -0.2, width)
        high = low + rng.uniform(0.4, 1.5, width)
        return {"mean": ((low + high) / 2).tolist(), "std": ((high - low) / 4).tolist(), "max": high.tolist(),
                "min": low.tolist(), "q01": (low + 0.05).tolist(), "q99": (high - 0.05).tolist()}

    return {"franka": {"action": {**section(7), "mask": [True] * 6 + [False]}, "state": section(8),
                       "num_transitions": 500, "num_trajectories": 10}}


def _original_client_actions(normalized: np.ndarray, stats: dict) -> np.ndarray:
    """The original's LIBERO client: clip, gripper (column 6) 0/1 at 0.5, min/max on the dims the mask keeps."""
    low, high, mask = (np.asarray(stats[k]) for k in ("min", "max", "mask"))
    actions = np.clip(normalized[..., :7], -1, 1)
    actions[..., 6] = np.where(actions[..., 6] < 0.5, 0, 1)
    return np.where(mask, 0.5 * (actions + 1) * (high - low) + low, actions)


LIBERO_DIMS = ["datasets.vla_data.data_mix=libero_all", "framework.action_model.action_dim=8",
               "datasets.vla_data.max_action_dim=8", "framework.action_model.state_dim=16",
               "datasets.vla_data.max_state_dim=16"]
# Keys of ours that the original's config tracker never writes, and the two it leaves out when it trained
# with DataLoader workers.
NOT_IN_ORIGINAL_RUN_CONFIG = ("trackers", "wandb_mode", "framework.cosmos25.prompt_cache",
                              "framework.cosmos25.prompt_store_dir", "datasets.vla_data.cache_dir",
                              "datasets.vla_data.holdout_episodes", "trainer.keep_last_states",
                              "trainer.save_full_state_dict", "trainer.mixed_precision",
                              "datasets.vla_data.max_state_dim", "datasets.vla_data.max_action_dim")


def _original_libero_run(root: Path, pipeline: Path, recorded_max_action_dim: int | None = None) -> Path:
    """An original-style LIBERO run folder: every weight, a config.yaml without the worker-read keys (or, when
    given, a max_action_dim the weights contradict)."""
    cfg = load_config(TINY_YAML, [f"framework.cosmos25.base_model={pipeline}", *TINY_MODEL, *LIBERO_DIMS])
    torch.manual_seed(5)
    model = build_framework(cfg)
    values = OmegaConf.to_container(recorded_config(cfg))
    for dotted in NOT_IN_ORIGINAL_RUN_CONFIG:
        *parents, leaf = dotted.split(".")
        node = values
        for parent in parents:
            node = node[parent]
        del node[leaf]
    if recorded_max_action_dim is not None:
        values["datasets"]["vla_data"]["max_action_dim"] = recorded_max_action_dim
    (root / "checkpoints").mkdir(parents=True)
    (root / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(values)))
    (root / "dataset_statistics.json").write_text(json.dumps(_original_statistics_libero()))
    checkpoint = root / "checkpoints/steps_80000_pytorch_model.pt"
    torch.save(model.state_dict(), checkpoint)
    return checkpoint


def test_an_original_libero_run_folder_without_the_worker_keys_serves_with_the_original_formula(
        tiny_pipeline_dir, tmp_path, caplog, one_torch_thread):
    checkpoint = _original_libero_run(tmp_path / "run", tiny_pipeline_dir)
    assert "max_action_dim" not in (tmp_path / "run/config.yaml").read_text()
    with caplog.at_level(logging.INFO, logger="DiT4DiT.model.framework.base_framework"):
        reply = _one_request(tmp_path / "run", checkpoint, [_example(32, 2, 16, seed=s) for s in range(2)])
    (line,) = [r.message for r in caplog.records if "inferred from" in r.message]
    assert "datasets.vla_data.max_action_dim=8" in line and "datasets.vla_data.max_state_dim=16" in line
    normalized, actions = reply["normalized_actions"], reply["actions"]
    assert normalized.shape == (2, 8, 8) and actions.shape == (2, 8, 7)
    stats = _original_statistics_libero()["franka"]["action"]
    np.testing.assert_allclose(actions, _original_client_actions(normalized, stats), rtol=1e-5, atol=1e-6)
    assert set(np.unique(actions[..., 6])) <= {0.0, 1.0}


def test_a_config_that_contradicts_its_checkpoint_is_an_error_naming_both(tiny_pipeline_dir, tmp_path):
    checkpoint = _original_libero_run(tmp_path / "run", tiny_pipeline_dir, recorded_max_action_dim=32)
    with pytest.raises(RunFolderError) as refused:
        Policy.load(checkpoint, torch.device("cpu"))
    message = str(refused.value)
    assert "config.yaml says datasets.vla_data.max_action_dim=32" in message
    assert "action_model.action_decoder.layer2.weight of shape [8, 64]" in message and checkpoint.name in message


FAMILIES = {  # mixture: (views, state width after sin/cos, action width padded)
    "libero_all": (2, 16, 8),
    "fourier_gr1_unified_1000": (1, 64, 32),
    "robotwin": (3, 14, 14),
}


def _expected_robot_actions(normalized: np.ndarray, section: dict) -> np.ndarray:
    """By hand from the statistics: min_max dims clipped then scaled into [min, max]; grippers 0/1."""
    modes = np.asarray(section["normalization"])
    low, high = np.asarray(section["min"]), np.asarray(section["max"])
    y = normalized[..., : len(modes)]
    scaled = (np.clip(y, -1, 1) + 1) / 2 * (high - low) + low
    gripper = ~np.asarray(section["mask"])
    return np.where(modes == "min_max", scaled, np.where(gripper, (np.clip(y, -1, 1) >= 0.5) * 1.0, y))


@pytest.mark.slow
@pytest.mark.parametrize("mixture", sorted(FAMILIES))
def test_actions_are_in_robot_units_for_each_family(mixture, tiny_pipeline_dir, tmp_path, one_torch_thread):
    views, state_width, action_width = FAMILIES[mixture]
    generate(mixture, tmp_path / "data", datasets=1, episodes=2, frames=(10, 14))
    cfg = load_config(TINY_YAML, [
        f"framework.cosmos25.base_model={tiny_pipeline_dir}", *TINY_MODEL, f"datasets.vla_data.data_mix={mixture}",
        f"datasets.vla_data.data_root_dir={tmp_path / 'data'}", f"datasets.vla_data.cache_dir={tmp_path / 'cache'}",
        f"framework.action_model.action_dim={action_width}", f"datasets.vla_data.max_action_dim={action_width}",
        f"framework.action_model.state_dim={state_width}", f"datasets.vla_data.max_state_dim={state_width}",
        "datasets.vla_data.holdout_episodes=0"])
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    statistics = dataset_of(cfg).statistics()
    save_dataset_statistics(statistics, run_dir / "dataset_statistics.json")
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(recorded_config(cfg)))
    torch.manual_seed(2)
    torch.save(build_framework(cfg).state_dict(), run_dir / "checkpoints/steps_1_pytorch_model.pt")
    reply = _one_request(run_dir, run_dir / "checkpoints/steps_1_pytorch_model.pt",
                         [_example(32, views, state_width, seed=s) for s in range(3)])
    (section,) = [entry["action"] for entry in statistics.values()]
    actions = reply["actions"]
    assert actions.shape == (3, 8, len(section["normalization"]))
    np.testing.assert_allclose(actions, _expected_robot_actions(reply["normalized_actions"], section),
                               rtol=1e-5, atol=1e-5)
    ranged = np.asarray(section["normalization"]) == "min_max"
    assert np.all(actions[..., ranged] >= np.asarray(section["min"])[ranged] - 1e-5)
    assert np.all(actions[..., ranged] <= np.asarray(section["max"])[ranged] + 1e-5)
    grippers = ~np.asarray(section["mask"])
    assert grippers.any() == (mixture != "fourier_gr1_unified_1000")
    assert set(np.unique(actions[..., grippers])) <= {0.0, 1.0}


def test_resume_takes_a_recorded_dit_size_and_a_null_one_as_the_same(tmp_path):
    from DiT4DiT.training.checkpoint import Resume
    from DiT4DiT.training.resume import ResumeError, check_config_unchanged

    weights_only = Resume(4, tmp_path / "checkpoints/steps_4_pytorch_model.pt", None, None)
    cfg = load_config(REPO / "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml")
    assert cfg.framework.action_model.diffusion_model_cfg.num_attention_heads is None
    for written in (recorded_config(cfg), cfg):  # ours now, and a run folder written before sizes were recorded
        (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(written))
        check_config_unchanged(cfg, tmp_path, weights_only, 1)
    larger = load_config(REPO / "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml",
                         ["framework.action_model.action_model_type=DiT-L"])
    with pytest.raises(ResumeError, match="num_attention_heads: 12 -> 32"):
        check_config_unchanged(larger, tmp_path, weights_only, 1)
