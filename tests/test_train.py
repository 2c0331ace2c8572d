"""The train step and the entry's handling of bad input, in-process."""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import TrainerSection
from DiT4DiT.config.typed import section
from DiT4DiT.training.optim import build_lr_scheduler, build_param_groups
from DiT4DiT.training.sampler import ResumableBatchOrder
from DiT4DiT.errors import TrainingError
from DiT4DiT.training.train import main, train_step

TINY_CONFIG = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


class Regressor(torch.nn.Module):
    """Stands in for the framework: a list of example dicts in, a dict of losses out."""

    def __init__(self):
        super().__init__()
        self.backbone_interface = None  # left empty, as a video-only model leaves action_model
        self.action_model = torch.nn.Linear(3, 1)

    def forward(self, examples):
        x = torch.stack([e["x"] for e in examples])
        y = torch.stack([e["y"] for e in examples])
        return {"action_loss": ((self.action_model(x) - y) ** 2).mean()}


def _run(micro_batches, accumulation, model):
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(gradient_accumulation_steps=accumulation, cpu=True)
    cfg = load_config(TINY_CONFIG, ["trainer.mixed_precision=no", "trainer.num_warmup_steps=0", "trainer.max_train_steps=10",
                                    "trainer.save_interval=10"])
    optimizer = torch.optim.AdamW(build_param_groups(model, cfg.trainer.learning_rate), lr=1e-2)
    scheduler = build_lr_scheduler(optimizer, cfg.trainer)
    model, optimizer = accelerator.prepare(model, optimizer)
    order = ResumableBatchOrder(len(micro_batches), 1, 0, 1, cfg.seed)
    values = train_step(micro_batches, 0, model=model, optimizer=optimizer, scheduler=scheduler, accelerator=accelerator,
                        settings=section(cfg.trainer, TrainerSection), batch_order=order)
    return accelerator.unwrap_model(model), values


def test_gradient_accumulation_matches_one_big_batch():
    torch.manual_seed(0)
    examples = [{"x": torch.randn(3), "y": torch.randn(1)} for _ in range(4)]
    seed_model = Regressor()
    accumulated, values = _run([examples[:2], examples[2:]], 2, copy.deepcopy(seed_model))
    whole, _ = _run([examples], 1, copy.deepcopy(seed_model))
    assert not torch.equal(accumulated.action_model.weight, seed_model.action_model.weight)
    torch.testing.assert_close(accumulated.action_model.weight, whole.action_model.weight)
    assert set(values) == {"action_loss", "total_loss", "grad_norm"}


def test_a_non_finite_loss_names_its_step_and_batch():
    examples = [{"x": torch.full((3,), float("nan")), "y": torch.zeros(1)}]
    with pytest.raises(TrainingError, match=r"non-finite loss at optimizer step 1, micro-batch 0 \(epoch 0, batch 0"):
        _run([examples], 1, Regressor())


def test_missing_config_yaml_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--trainer.max_train_steps=3"])
    assert exit_info.value.code == 2
    assert "--config_yaml" in capsys.readouterr().err


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--framework.cosmos25.base_model=/nowhere/cosmos"], "folder '/nowhere/cosmos' does not exist"),
        (["--datasets.vla_data.data_root_dir=/nowhere/data"], "folder '/nowhere/data' does not exist"),
        (["--trainer.max_train_step=5"], "Did you mean 'trainer.max_train_steps'?"),
    ],
)
def test_bad_input_exits_2_before_anything_is_built(tmp_path, capsys, overrides, message):
    (tmp_path / "model").mkdir()
    (tmp_path / "data").mkdir()
    code = main(["--config_yaml", TINY_CONFIG, f"--framework.cosmos25.base_model={tmp_path / 'model'}",
                 f"--datasets.vla_data.data_root_dir={tmp_path / 'data'}", f"--run_root_dir={tmp_path / 'runs'}", *overrides])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_non_finite_first_micro_batch_stops_the_step_before_any_weight_changes():
    """The guard reads the flags once per optimizer step, before the last backward: micro-batch 0 is still named."""
    torch.manual_seed(0)
    good = [{"x": torch.randn(3), "y": torch.randn(1)}]
    bad = [{"x": torch.full((3,), float("nan")), "y": torch.zeros(1)}]
    model = Regressor()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(TrainingError, match=r"non-finite loss at optimizer step 1, micro-batch 0 \(epoch 0, batch 0"):
        _run([bad, good], 2, model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_the_total_and_the_originals_scaled_video_metric_scale_the_video_loss_alike():
    """The scaled video loss has one home (TrainerLossScaleSection.scaled_video): the total the optimizer steps on
    and the future_video_loss_scaled wandb logs agree for any scale."""
    from DiT4DiT.config.sections import TrainerLossScaleSection
    from DiT4DiT.training.metrics import with_original_names
    from DiT4DiT.training.train import compose_loss

    for scale in (0.0, 0.25, 3.0):
        losses = {"action_loss": torch.tensor(1.5), "future_video_loss": torch.tensor(0.8)}
        total = compose_loss(losses, TrainerLossScaleSection(future_video=scale))
        logged = with_original_names({"future_video_loss": 0.8}, scale)["future_video_loss_scaled"]
        assert float(total) - 1.5 == pytest.approx(logged)
