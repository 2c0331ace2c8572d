"""trainer.enable_gradient_checkpointing: the Cosmos blocks the video pass runs and the action DiT blocks are
recomputed in the backward pass; losses and gradients do not change, and each block keeps only its input."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from helpers.training_runs import ROOT, environment, metrics, trainer_command

from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.modules.activation_checkpointing import checkpointed
from DiT4DiT.tools.measure_activation_memory import first_blocks, saved_for_backward_bytes
from DiT4DiT.tools.synthetic_inputs import transformer_inputs

# Dropout in the action DiT: the recomputed blocks must draw the same masks.
HEAD_DROPOUT = "framework.action_model.diffusion_model_cfg.dropout=0.2"


def forward_calls(module: torch.nn.Module) -> list[int]:
    calls = [0]
    # A pre-hook: the recomputation stops once it has rebuilt what the backward needs, before forward hooks run.
    module.register_forward_pre_hook(lambda *args: calls.__setitem__(0, calls[0] + 1))
    return calls


def step(model, examples) -> tuple[dict, dict]:
    torch.manual_seed(7)
    losses = model(examples)
    sum(losses.values()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return {name: loss.detach() for name, loss in losses.items()}, grads


def test_losses_and_gradients_equal_with_and_without_checkpointing(tiny_model_cfg, tiny_examples):
    plain_cfg = tiny_model_cfg(HEAD_DROPOUT)
    checkpointed_cfg = tiny_model_cfg(HEAD_DROPOUT, "trainer.enable_gradient_checkpointing=true")
    plain, recomputing = build_framework(plain_cfg), build_framework(checkpointed_cfg)
    recomputing.load_state_dict(plain.state_dict())
    extractor = recomputing.backbone_interface.extractor
    cosmos_calls = forward_calls(extractor.transformer.transformer_blocks[-1])
    head_calls = forward_calls(recomputing.action_model.model.transformer_blocks[-1])
    examples = tiny_examples(plain_cfg, batch=2)

    losses, grads = step(plain, examples)
    checkpointed_losses, checkpointed_grads = step(recomputing, examples)

    assert losses.keys() == checkpointed_losses.keys() == {"action_loss", "future_video_loss"}
    for name, loss in losses.items():
        assert torch.allclose(loss, checkpointed_losses[name], rtol=0, atol=1e-6), name
    assert grads.keys() == checkpointed_grads.keys() and any("transformer_blocks" in name for name in grads)
    for name, grad in grads.items():
        assert torch.allclose(grad, checkpointed_grads[name], rtol=0, atol=1e-6), name
    # The last Cosmos block ran in the video pass and again in its backward (the feature pass stops earlier); the
    # head's last block ran forward and again in the backward.
    assert cosmos_calls == [2] and head_calls == [2]


def test_a_checkpointed_cosmos_block_keeps_only_its_input(tiny_pipeline_dir):
    """Each further block adds one hidden state (B x S x D, float32 here) to what the video pass keeps, instead of
    everything the block's backward needs."""
    from diffusers import CosmosTransformer3DModel

    transformer = CosmosTransformer3DModel.from_pretrained(tiny_pipeline_dir / "transformer").train()
    batch, frames, height, width = 2, 2, 8, 12
    inputs = transformer_inputs(transformer.config, batch=batch, frames=frames, height=height, width=width)
    tokens = frames * (height // 2) * (width // 2)
    hidden = transformer.config.num_attention_heads * transformer.config.attention_head_dim

    def per_block(checkpointing: bool) -> int:
        if checkpointing:
            transformer.enable_gradient_checkpointing(checkpointed)
        else:
            transformer.disable_gradient_checkpointing()
        saved = []
        for blocks in (1, 2):
            with first_blocks(transformer, blocks):
                saved.append(saved_for_backward_bytes(lambda: transformer(**inputs), transformer.parameters())[0])
        return saved[1] - saved[0]

    assert per_block(checkpointing=True) == batch * tokens * hidden * 4
    # Measured at this size: 26x; at the real width (2048) 56x (DiT4DiT/memory/measured.py MEASURED).
    assert per_block(checkpointing=False) > 20 * per_block(checkpointing=True)


def test_the_action_head_checkpoints_its_blocks_only_with_grad(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg("trainer.enable_gradient_checkpointing=true")
    model = build_framework(cfg)
    head_calls = forward_calls(model.action_model.model.transformer_blocks[0])
    model.predict_action(tiny_examples(cfg, batch=1))
    assert head_calls[0] == cfg.framework.action_model.num_inference_timesteps  # no graph, no recompute


@pytest.mark.slow
@pytest.mark.xdist_group("deepspeed")  # beside the other DeepSpeed runs: the first one on CPU builds its shm op
def test_deepspeed_zero2_trains_the_same_with_checkpointing(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    """ZeRO-2 with bf16 on one CPU process: two steps with and without checkpointing log the same losses."""

    def run(run_id: str, *overrides: str) -> list[dict]:
        command = trainer_command(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, run_id, "--trainer.max_train_steps=2",
                                  "--trainer.logging_frequency=1", f"--{HEAD_DROPOUT}", *overrides)
        at = command.index("--config_file")
        command[at + 1] = "DiT4DiT/config/deepseeds/deepspeed_zero2.yaml"
        result = subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        return [{k: r[k] for k in ("step", "action_loss", "future_video_loss")} for r in metrics(tmp_path / run_id)
                if "total_loss" in r]

    plain = run("plain")
    assert len(plain) == 2
    assert run("checkpointed", "--trainer.enable_gradient_checkpointing=true") == plain


def test_the_text_encoders_layers_checkpointed_give_the_same_losses_and_gradients(tiny_model_cfg, tiny_examples):
    """trainer.text_encoder_gradient_checkpointing with the text encoder trained (freeze_modules ''): its layers and
    the embedding's normalisation are recomputed in the backward; losses and every gradient stay as they were."""
    from DiT4DiT.config.sections import TrainerSection
    from DiT4DiT.config.typed import section
    from DiT4DiT.training.trainer import set_up_model

    plain_cfg = tiny_model_cfg("trainer.freeze_modules=''", "framework.cosmos25.prompt_cache=false")
    recomputing_cfg = tiny_model_cfg("trainer.freeze_modules=''", "framework.cosmos25.prompt_cache=false",
                                     "trainer.text_encoder_gradient_checkpointing=true")
    plain = set_up_model(build_framework(plain_cfg), section(plain_cfg.trainer, TrainerSection), None, False)
    recomputing = set_up_model(build_framework(recomputing_cfg), section(recomputing_cfg.trainer, TrainerSection),
                               None, False)
    recomputing.load_state_dict(plain.state_dict())
    # as the trainer leaves them: the text encoder in the eval mode from_pretrained gives it, unless checkpointed
    text_encoder = recomputing.backbone_interface.extractor.text_encoder
    assert text_encoder.is_gradient_checkpointing
    layer_calls = forward_calls(text_encoder.model.language_model.layers[-1])
    examples = tiny_examples(plain_cfg, batch=2)

    losses, grads = step(plain, examples)
    checkpointed_losses, checkpointed_grads = step(recomputing, examples)
    for name, loss in losses.items():
        assert torch.allclose(loss, checkpointed_losses[name], rtol=0, atol=1e-6), name
    assert grads.keys() == checkpointed_grads.keys() and any("text_encoder" in name for name in grads)
    for name, grad in grads.items():
        assert torch.allclose(grad, checkpointed_grads[name], rtol=0, atol=1e-6), name
    assert layer_calls == [2]  # the forward, and again in the backward


@pytest.mark.parametrize("blocks", ["0", "1", "3"])
def test_recomputing_some_blocks_leaves_losses_and_gradients_unchanged(blocks, tiny_model_cfg, tiny_examples):
    """trainer.gradient_checkpointing_blocks=N: the first N of the 4 Cosmos blocks run again in the backward pass
    (the last one only when N is 4), and the step computes what it computes without any checkpointing."""
    plain_cfg = tiny_model_cfg(HEAD_DROPOUT)
    some_cfg = tiny_model_cfg(HEAD_DROPOUT, f"trainer.gradient_checkpointing_blocks={blocks}")
    plain, some = build_framework(plain_cfg), build_framework(some_cfg)
    some.load_state_dict(plain.state_dict())
    transformer_blocks = some.backbone_interface.extractor.transformer.transformer_blocks
    calls = [forward_calls(block) for block in transformer_blocks]
    examples = tiny_examples(plain_cfg, batch=2)
    losses, grads = step(plain, examples)
    some_losses, some_grads = step(some, examples)
    for name, loss in losses.items():
        assert torch.equal(loss, some_losses[name]), name
    assert grads.keys() == some_grads.keys()
    assert all(torch.equal(grad, some_grads[name]) for name, grad in grads.items())
    # The feature pass runs blocks 0..extract_layer (2) once; the video pass runs all four; the recomputed run again.
    runs = [(1 if index <= 2 else 0) + 1 + (index < int(blocks)) for index in range(4)]
    assert [c[0] for c in calls] == runs


def test_each_recomputed_block_saves_what_the_estimate_says(one_torch_thread):
    """At 256 wide (2 heads x 128), 4 blocks: recomputing 2 of them lowers the bytes the video pass saves by twice
    the estimate's difference between a kept and a recomputed block (within 10%), and 4 by four times it."""
    from DiT4DiT.memory.estimate import cosmos_block_saved_bytes
    from DiT4DiT.model.modules.activation_checkpointing import checkpoint_first
    from DiT4DiT.tools.measure_activation_memory import cosmos_transformer, video_inputs

    transformer = cosmos_transformer(heads=2, blocks=4, text_projection=False)
    inputs = video_inputs(transformer, 2, (1, 10, 18), 96)

    def saved(recomputed: int) -> int:
        transformer.enable_gradient_checkpointing(checkpoint_first(transformer.transformer_blocks, recomputed))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return saved_for_backward_bytes(lambda: transformer(**inputs), transformer.parameters())[0]

    per_block = (cosmos_block_saved_bytes(256, 180, 96, False, 2) - cosmos_block_saved_bytes(256, 180, 96, True, 2))
    none, two, four = saved(0), saved(2), saved(4)
    assert none - two == pytest.approx(2 * per_block, rel=0.10)
    assert none - four == pytest.approx(4 * per_block, rel=0.10)


@pytest.mark.parametrize("value, words", [("some", "give a count of blocks (e.g. 14), auto"),
                                          ("5", "has 4 blocks; give at most 4")])
def test_a_block_count_the_model_cannot_use_is_refused(value, words, tiny_model_cfg):
    from DiT4DiT.config.errors import ConfigError
    from DiT4DiT.config.validate import check_backbone_fits

    with pytest.raises(ConfigError, match=re.escape(words)):
        check_backbone_fits(tiny_model_cfg(f"trainer.gradient_checkpointing_blocks={value}"))
