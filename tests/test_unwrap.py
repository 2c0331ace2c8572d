"""Runs without DeepSpeed never call accelerate's unwrap_model or get_state_dict: both import deepspeed, about 9 s
of CPU at every trainer process start. DeepSpeed runs still go through them."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedType

from DiT4DiT.training.unwrap import full_state_dict, unwrap
from helpers.training_runs import train_in_process


def imports_deepspeed(*_args, **_kwargs):
    raise AssertionError("accelerate's unwrapping imports deepspeed")


@pytest.fixture
def no_accelerate_unwrapping(monkeypatch):
    monkeypatch.setattr(Accelerator, "unwrap_model", imports_deepspeed)
    monkeypatch.setattr(Accelerator, "get_state_dict", imports_deepspeed)


@pytest.fixture
def cpu_accelerator(no_accelerate_unwrapping):
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield Accelerator(cpu=True)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_a_wrapped_model_is_unwrapped_without_accelerate(cpu_accelerator):
    model = torch.nn.Linear(2, 3)
    wrapped = torch.nn.DataParallel(torch.nn.DataParallel(model))
    assert unwrap(cpu_accelerator, wrapped) is model
    state = full_state_dict(cpu_accelerator, wrapped)
    assert state.keys() == {"weight", "bias"} and torch.equal(state["weight"], model.weight)


def test_a_deepspeed_run_goes_through_accelerate(monkeypatch, cpu_accelerator):
    monkeypatch.setattr(Accelerator, "distributed_type", property(lambda self: DistributedType.DEEPSPEED))
    with pytest.raises(AssertionError, match="imports deepspeed"):
        unwrap(cpu_accelerator, torch.nn.Linear(2, 3))
    with pytest.raises(AssertionError, match="imports deepspeed"):
        full_state_dict(cpu_accelerator, torch.nn.Linear(2, 3))


def test_a_cpu_run_trains_and_saves_without_accelerates_unwrapping(no_accelerate_unwrapping, tiny_pipeline_dir,
                                                                   tiny_robotwin_root, tmp_path):
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "plain", "--trainer.max_train_steps=2",
                              "--trainer.save_interval=2", "--trainer.eval_interval=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "plain/final_model/pytorch_model.pt").is_file()
    assert (tmp_path / "plain/checkpoints/steps_2_pytorch_model.pt").is_file()
