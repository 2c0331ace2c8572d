"""The trainer and the config: errors before any dataset work, mixed precision, and what checkpoints leave out.

In-process `main()` runs on the tiny pipeline and tiny RoboTwin data (one process, no accelerate launcher).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import DiT4DiT.dataloader.build as build
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.framework.DiT4DiT import DiT4DiT
from helpers.training_runs import train_in_process

TRANSFORMER = "backbone_interface.extractor.transformer"


def run_main(pipeline, data, run_root, *overrides: str):
    return train_in_process(pipeline, data, run_root, "run", "--trainer.max_train_steps=2", "--trainer.save_interval=2",
                            "--trainer.num_warmup_steps=1", *overrides)


@pytest.fixture
def index_builds(monkeypatch) -> list[str]:
    """Every dataset index the data loader builds (or reads from its cache) during the test."""
    built, load_index = [], build.load_index

    def counting(layout, *args, **kwargs):
        built.append(str(layout.root))
        return load_index(layout, *args, **kwargs)

    monkeypatch.setattr(build, "load_index", counting)
    return built


@pytest.mark.parametrize("override, message", [
    ("--framework.action_model.action_horizon=4", "action_horizon (4) must equal future_action_window_size + 1 (8)"),
    ("--datasets.vla_data.image_size=40", "image_size=40: Cosmos needs frame sides that are multiples of 16"),
    ("--trainer.learning_rate.action_model=-1", "trainer.learning_rate.action_model: must be at least 0.0, got -1.0"),
    ("--seed=-1", "seed: must be at least 0, got -1"),
    ("--framework.action_model.state_dim=7", "state_dim=7 must equal datasets.vla_data.max_state_dim=14"),
])
def test_config_errors_come_before_any_dataset_work(tiny_pipeline_dir, tiny_robotwin_root, tmp_path,
                                                    index_builds, override, message):
    result = run_main(tiny_pipeline_dir, tiny_robotwin_root, tmp_path / "runs", override)
    err = result.stderr
    assert result.returncode == 2, err
    assert err.count("config error: ") == 1 and message in err
    assert "Traceback" not in err
    assert index_builds == []
    assert not (tmp_path / "runs").exists()


def test_a_batch_larger_than_the_data_is_a_config_error_once_the_training_split_is_known(
        tiny_pipeline_dir, tiny_robotwin_root, tmp_path, index_builds):
    result = run_main(tiny_pipeline_dir, tiny_robotwin_root, tmp_path / "runs",
                      "--datasets.vla_data.per_device_batch_size=100000")
    err = result.stderr
    assert result.returncode == 2, err
    assert err.count("config error: the dataset has ") == 1 and "lower datasets.vla_data.per_device_batch_size" in err
    assert len(index_builds) == 3  # the training split's three task folders; the eval split is never built


@pytest.fixture(scope="module")
def frozen_transformer_run(tiny_pipeline_dir, tiny_robotwin_root, tmp_path_factory):
    """Two steps of action-mode training with the video transformer frozen, bf16 mixed precision asked for."""
    run_root = tmp_path_factory.mktemp("runs")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = run_main(tiny_pipeline_dir, tiny_robotwin_root, run_root, "--framework.cosmos25.training=action",
                        "--trainer.mixed_precision=bf16",
                        f"--trainer.freeze_modules=backbone_interface.extractor.text_encoder,"
                        f"backbone_interface.extractor.vae,{TRANSFORMER}")
    assert result.returncode == 0, result.stderr[-3000:]
    return run_root / "run", [str(w.message) for w in record]


def test_a_cpu_run_warns_nothing_about_cuda(frozen_transformer_run):
    _, messages = frozen_transformer_run
    # torch warns "User provided device_type of 'cuda', but CUDA is not available" on entering an enabled
    # autocast("cuda") here; the sites are entered disabled where they cannot act.
    assert [m for m in messages if "CUDA" in m] == []


def test_a_frozen_transformer_checkpoint_loads_back(frozen_transformer_run):
    run_dir, _ = frozen_transformer_run
    final = run_dir / "final_model" / "pytorch_model.pt"
    saved = torch.load(final, weights_only=True)
    assert not [k for k in saved if k.startswith(TRANSFORMER + ".")]
    assert any(k.startswith("action_model.") for k in saved)
    model = DiT4DiT.from_pretrained(final)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())


def test_mixed_precision_no_runs_fp32_end_to_end(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("trainer.mixed_precision=no")
    model = build_framework(cfg)
    dtypes = set()

    def record(module, inputs, output):
        for value in (output if isinstance(output, (tuple, list)) else [output]):
            if torch.is_tensor(value) and value.is_floating_point():
                dtypes.add(value.dtype)

    for module in model.modules():
        module.register_forward_hook(record)
    losses = model(tiny_examples(cfg))
    assert {loss.dtype for loss in losses.values()} == {torch.float32}
    assert dtypes == {torch.float32} and len(losses) == 2


@pytest.fixture
def attention_kernels(monkeypatch):
    """Set which fused-attention kernels transformers reports as installed: (flash-attn, torch_npu)."""
    import transformers.utils

    def set_available(flash_attn: bool, torch_npu: bool) -> None:
        monkeypatch.setattr(transformers.utils, "is_flash_attn_2_available", lambda: flash_attn)
        monkeypatch.setattr(transformers.utils, "is_torch_npu_available", lambda: torch_npu)

    return set_available


@pytest.mark.parametrize("requested, kernels, used", [
    ("flash_attention_2", (False, False), "sdpa"),
    ("flash_attention_2", (True, False), "flash_attention_2"),
    ("flash_attention_2", (False, True), "flash_attention_2"),
    ("eager", (False, False), "eager"),
    ("sdpa", (False, False), "sdpa"),
])
def test_attention_implementation_is_honoured_where_it_can_work(attention_kernels, requested, kernels, used):
    from DiT4DiT.model.modules.cosmos_pipeline import text_encoder_attention

    attention_kernels(*kernels)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert text_encoder_attention(requested) == used
    notices = [str(w.message) for w in record]
    assert notices == ([] if used == requested else [
        "framework.cosmos25.attn_implementation=flash_attention_2: neither flash-attn nor torch_npu is installed, "
        "so the text encoder uses sdpa"])


def test_the_originals_flash_attention_setting_builds_where_flash_attn_is_absent(attention_kernels, tiny_model_cfg):
    attention_kernels(False, False)
    with pytest.warns(RuntimeWarning, match="the text encoder uses sdpa"):
        model = build_framework(tiny_model_cfg("framework.cosmos25.attn_implementation=flash_attention_2"))
    assert model.action_model is not None
