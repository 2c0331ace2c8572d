"""No training step makes the device wait for the host: every host-to-device copy on the step path is queued
(non_blocking=True, from pinned memory where an accelerator exists), and nothing constant is copied per step.

With no accelerator here, the model runs on the meta device, which stands in for one: a tensor created on the
host (the batch, the prompt store's embeddings, a host-sampled time) reaches the model only through a copy from
"cpu" to "meta", and that copy is an aten op a dispatch mode sees with its non_blocking flag, wherever it happens
(our code, diffusers, torch.optim). On CPU the same copies would be no-ops that nothing can observe. Before this
test's change the tiny step made 11 blocking copies (frames 1, prompt embeddings 2, latent statistics 4,
action/mask/state 3, flow time 1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules
from DiT4DiT.model.modules.host_to_device import model_batch


class HostToDeviceCopies(TorchDispatchMode):
    """Records every copy of a host tensor to another device: (op, shape, non_blocking)."""

    def __init__(self):
        super().__init__()
        self.copies: list[tuple[str, tuple, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.__name__.split(".")[0]
        if name in ("_to_copy", "copy_", "_copy_from"):
            source, target = (args[1], args[0]) if name == "copy_" else (args[0], out)
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            if source.device.type == "cpu" and target.device.type != "cpu":
                self.copies.append((name, tuple(source.shape), bool(non_blocking)))
        return out


@pytest.mark.slow
def test_a_training_step_makes_no_blocking_host_to_device_copy(tiny_model_cfg, tiny_examples):
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    freeze_modules(model, cfg.trainer.freeze_modules)
    examples = tiny_examples(cfg)
    batch, chunk, width = len(examples), cfg.framework.action_model.future_action_window_size + 1, cfg.datasets.vla_data.max_action_dim
    frames = tuple(torch.stack(examples[0]["image"]).shape)
    embedding = (cfg.framework.cosmos25.max_sequence_length,
                 model.backbone_interface.extractor.transformer.config.crossattn_proj_in_channels)
    expected = [(batch, *frames), (batch, *embedding), (batch, chunk, width), (batch, chunk, width),
                (batch, 1, cfg.datasets.vla_data.max_state_dim), (batch * cfg.trainer.repeated_diffusion_steps,)]
    model.prepare_prompts([example["lang"] for example in examples])  # set-up: the store is filled once
    model.to("meta")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    for _ in range(2):  # the second step sees the optimizer state as every later step does
        with HostToDeviceCopies() as recorder:
            losses = model(examples)
            sum(losses.values()).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        assert set(losses) == {"action_loss", "future_video_loss"}
        assert [copy for copy in recorder.copies if not copy[2]] == []
        # One queued copy per host input: frames, prompt embeddings, actions, mask, state, flow times.
        assert sorted(shape for _, shape, _ in recorder.copies) == sorted(expected)


def test_latent_statistics_move_with_the_model_and_survive_a_bf16_cast(tiny_model_cfg):
    extractor = build_framework(tiny_model_cfg()).backbone_interface.extractor
    std = extractor.latents_std.clone()
    assert extractor.latents_std.dtype == torch.float32
    assert not any("latents" in key for key in extractor.state_dict())  # they come from the VAE config
    extractor.bfloat16()  # what DeepSpeed bf16 does to the whole module
    assert extractor.latents_std.dtype == torch.float32 and torch.equal(extractor.latents_std, std)
    assert extractor.to("meta").latents_mean.device.type == "meta"


def test_the_model_batch_holds_each_field_stacked_in_its_dtype():
    rng = np.random.default_rng(0)
    examples = [{"image": [rng.integers(0, 256, (8, 10, 3), dtype=np.uint8) for _ in range(2)], "lang": f"task {i}",
                 "action": rng.standard_normal((4, 3)), "action_mask": rng.integers(0, 2, (4, 3)),
                 "state": rng.standard_normal((1, 2)).astype(np.float32)} for i in range(3)]
    batch = model_batch(examples, torch.device("cpu"), torch.bfloat16, targets=True, state=True)
    # What the model computed before: np.stack, then a conversion of the whole stack.
    for key, tensor, dtype in (("action", batch.actions, torch.bfloat16), ("action_mask", batch.mask, torch.bool),
                               ("state", batch.state, torch.bfloat16)):
        expected = torch.as_tensor(np.stack([example[key] for example in examples])).to(dtype)
        assert tensor.dtype == dtype and torch.equal(tensor, expected)
    # Frames: HWC bytes become (B, T, 3, H, W) floats in [0, 1].
    frames = torch.as_tensor(np.stack([np.stack(example["image"]) for example in examples])).permute(0, 1, 4, 2, 3)
    assert torch.equal(batch.video, frames.float() / 255.0)
    assert batch.instructions == ["task 0", "task 1", "task 2"]
    predicting = model_batch(examples, torch.device("cpu"), torch.float32, targets=False, state=False,
                             current_frame_only=True)
    assert (predicting.actions, predicting.mask, predicting.state) == (None, None, None)
    assert torch.equal(predicting.video, batch.video[:, :1])


def test_frames_of_different_shapes_are_refused_with_both_shapes():
    frame = np.zeros((8, 10, 3), dtype=np.uint8)
    examples = [{"image": [frame, frame], "lang": "a"}, {"image": [frame], "lang": "b"}]
    with pytest.raises(ValueError, match=r"sample 1 has frames \(1, 3, 8, 10\).*sample 0 has \(2, 3, 8, 10\)"):
        model_batch(examples, torch.device("cpu"), torch.float32, targets=False, state=False)


def test_stored_prompt_embeddings_reach_the_device_in_the_model_batch(tiny_model_cfg, tiny_examples, monkeypatch):
    """The prompt store's embeddings travel in the ModelBatch (host_to_device.model_batch, the model's one
    conversion of its input), not on a trip of their own inside the backbone."""
    cfg = tiny_model_cfg()
    model = build_framework(cfg)
    freeze_modules(model, cfg.trainer.freeze_modules)
    examples = tiny_examples(cfg)
    model.prepare_prompts([example["lang"] for example in examples])
    extractor = model.backbone_interface.extractor
    batch = model._model_batch(examples, targets=True)
    assert torch.equal(batch.prompt_embeds, extractor.prompt_embeddings(batch.instructions, torch.device("cpu")))

    def second_trip(*args, **kwargs):
        raise AssertionError("the backbone looked the prompts up again")

    monkeypatch.setattr(extractor, "prompt_embeddings", second_trip)
    assert set(model(examples)) == {"action_loss", "future_video_loss"}
