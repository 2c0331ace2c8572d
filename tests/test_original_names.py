"""Names and environment as the original's users have them: its metric names in wandb, an exported WANDB_MODE,
its default seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import TrainerSection
from DiT4DiT.config.typed import section
from DiT4DiT.training.metrics import MetricsLogger, WandbRun, wandb_mode, with_original_names

TINY_YAML = Path(__file__).resolve().parents[1] / "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


@pytest.mark.parametrize("exported, override, expected", [
    (None, None, "offline"),  # nothing said: offline, as before
    ("online", None, "online"),  # the original's launch scripts export WANDB_MODE=online
    ("online", "disabled", "disabled"),  # a wandb_mode key (YAML or command line) wins over both
    (None, "online", "online"),
])
def test_an_exported_wandb_mode_wins_over_the_default_and_the_key_over_both(exported, override, expected, monkeypatch):
    if exported is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", exported)
    cfg = load_config(TINY_YAML, [f"wandb_mode={override}"] if override else [])
    assert wandb_mode(cfg.wandb_mode) == WandbRun.of(cfg).mode == expected


def test_a_yaml_without_seed_gets_the_originals_default(tmp_path):
    bare = tmp_path / "no_seed.yaml"
    bare.write_text("run_id: bare\n")
    assert load_config(bare).seed == 3047
    assert load_config(TINY_YAML).seed == 42  # a YAML that sets it keeps it


def test_the_originals_metric_names_are_added_not_substituted():
    record = {"action_loss": 0.5, "future_video_loss": 0.2, "total_loss": 0.6, "eval_action_mse": 0.1,
              "grad_norm": 1.0}
    named = with_original_names(record, future_video_scale=0.5)
    assert {k: named[k] for k in record} == record
    assert (named["action_dit_loss"], named["mse_score"], named["future_video_loss_scaled"]) == (0.5, 0.1, 0.1)
    assert set(named) - set(record) == {"action_dit_loss", "mse_score", "future_video_loss_scaled"}
    assert with_original_names({"grad_norm": 1.0}, 1.0) == {"grad_norm": 1.0}


def test_wandb_receives_both_names_and_metrics_jsonl_keeps_ours(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = load_config(TINY_YAML, ["trackers=[jsonl,wandb]", "wandb_mode=offline", f"run_root_dir={tmp_path}"])
    logger = MetricsLogger(section(cfg.trainer, TrainerSection), tmp_path, 0, cfg.trackers, WandbRun.of(cfg))
    try:
        logger.log({"step": 1, "action_loss": 0.5, "future_video_loss": 0.2, "total_loss": 0.7})
        logger.log({"step": 1, "eval_action_mse": 0.25})
        logger.log({"step": 2, "grad_norm": 1.0})  # wandb commits step 1's row when step 2 begins
        summary = dict(logger.wandb_run.summary)
    finally:
        logger.close()
    assert summary["action_dit_loss"] == summary["action_loss"] == 0.5
    assert summary["mse_score"] == 0.25 and summary["future_video_loss_scaled"] == pytest.approx(0.2)
    assert "action_dit_loss" not in (tmp_path / "metrics.jsonl").read_text()
