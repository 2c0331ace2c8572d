"""The DiT4DiT framework: Cosmos-Predict2.5 features feed a flow-matching action DiT, and a future-frame
flow-matching loss trains the video transformer alongside.

This file is CUDA-first, like the original: the NPU patch rewrites its four torch.autocast("cuda", ...) sites.
`trainer.mixed_precision` governs all four, and they are entered enabled only where the device they name exists
(elsewhere torch would warn on every step and disable them anyway).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from DiT4DiT.config.schema import ConfigError, ConfigLike, config_of
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.config.validate import has_action_head
from DiT4DiT.model.framework import register_framework
from DiT4DiT.model.modules.action_model.flow_matching_head import build_action_head
from DiT4DiT.model.modules.action_model.rtc import ChunkPrefix
from DiT4DiT.model.modules.cosmos_backbone import CosmosBackboneInterface
from DiT4DiT.model.modules.host_to_device import ModelBatch, model_batch
from DiT4DiT.model.modules.node_store import Ranks


def autocast_enabled(mixed_precision: str) -> bool:
    """Whether the autocast sites (here and in the train step) run: bf16 mixed precision is asked for and CUDA, or
    the NPU that torch_npu's transfer_to_npu puts behind torch.cuda, exists."""
    return mixed_precision == "bf16" and torch.cuda.is_available()


@register_framework("DiT4DiT")
class DiT4DiT(nn.Module):
    def __init__(self, config: ConfigLike):
        """The model of `config`: the typed config (load_config's), or the original's form (an OmegaConf tree or a
        dict), converted and checked once here; `self.config` is the typed config either way."""
        super().__init__()
        cfg = config_of(config)
        self.config: ConfigSections = cfg
        self.norm_stats = None
        trainer, action_cfg = cfg.trainer, cfg.framework.action_model
        self.repeated_diffusion_steps = trainer.repeated_diffusion_steps
        self.chunk_len = action_cfg.chunk_length
        self.autocast_enabled = autocast_enabled(trainer.mixed_precision)
        checkpointing = trainer.enable_gradient_checkpointing
        # The backbone checks that vl_hidden_dim (the head's feature width) matches its transformer.
        head = (build_action_head(action_cfg, cfg.framework.cosmos25.vl_hidden_dim, checkpointing)
                if has_action_head(cfg) else None)
        self.backbone_interface = CosmosBackboneInterface(
            cfg.framework.cosmos25,
            num_frames_out=cfg.datasets.vla_data.num_frames,
            prompt_store_dir=cfg.store_dir("prompt"),
            gradient_checkpointing=checkpointing,
            gradient_checkpointing_blocks=trainer.gradient_checkpointing_blocks,
            latent_store_dir=cfg.store_dir("latent"),
        )
        self.training_mode = self.backbone_interface.training_mode
        self.action_model = head

    def prepare_prompts(self, instructions, ranks: Ranks | None = None):
        """Once, after accelerator.prepare: every instruction into the prompt store (encoding split across `ranks`,
        the training processes; one process without), then the frozen text encoder is released; training never runs
        it again. Returns the store's FillReport."""
        ranks = ranks or Ranks()
        # A full state dict includes the text encoder, so it is kept when checkpoints must hold it.
        release = not self.config.trainer.save_full_state_dict
        return self.backbone_interface.extractor.prepare_prompts(instructions, ranks, release_encoder=release)

    def prepare_latents(self, datasets, ranks: Ranks | None = None):
        """Once, after prepare_prompts: every clip the datasets' samples can draw into the latent store (encoding
        split across ranks); from then on their samples carry the stored posteriors in place of frames. Returns the
        store, or None when framework.cosmos25.latent_cache is off."""
        ranks = ranks or Ranks()
        episodes = [episode for dataset in datasets for episode in dataset.latent_episodes()]
        store = self.backbone_interface.prepare_latents(
            episodes, datasets[0].sample_layout(), ranks, self.config.datasets.vla_data.per_device_batch_size,
            self.config.trainer.mixed_precision)
        for dataset in datasets if store is not None else ():
            dataset.use_latents(store)
        return store

    def _model_batch(self, examples: list[dict], *, targets: bool) -> ModelBatch:
        """The examples on the model's device, the one conversion: frames (all of them for training, the current
        one when predicting) and instructions, actions and mask (`targets`, for training) and state."""
        head = self.action_model
        batch = model_batch(
            examples, self.backbone_interface.device, head.dtype if head is not None else torch.float32,
            targets=targets and head is not None,
            state=head is not None and head.state_encoder is not None and "state" in examples[0],
            current_frame_only=not targets,  # only the current observation conditions a predicted action
            stored_prompts=self.backbone_interface.extractor.stored_prompts([example["lang"] for example in examples]),
        )
        if batch.actions is not None and batch.actions.shape[1] != self.chunk_len:
            raise ConfigError(
                f"examples carry {batch.actions.shape[1]} action steps but the model expects "
                f"framework.action_model.future_action_window_size + 1 = {self.chunk_len}; make the data's action "
                "chunk and future_action_window_size agree"
            )
        return batch

    def _action_loss(self, features: torch.Tensor, batch: ModelBatch) -> torch.Tensor:
        repeats = self.repeated_diffusion_steps
        return self.action_model(
            features.to(self.action_model.dtype).repeat(repeats, 1, 1),
            batch.actions.repeat(repeats, 1, 1),
            batch.mask.repeat(repeats, 1, 1),
            batch.state.repeat(repeats, 1, 1) if batch.state is not None else None,
        )

    def forward(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        """Training losses: action_loss (unless training=video) and future_video_loss (when computed)."""
        batch = self._model_batch(examples, targets=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast_enabled):
            backbone = self.backbone_interface(
                batch.video,
                batch.instructions,
                want_features=self.action_model is not None,
                want_video_loss=self.training_mode != "action",
                posterior=batch.posterior,
                prompt_embeds=batch.prompt_embeds,
            )
        losses = {}
        if self.action_model is not None:
            with torch.autocast("cuda", dtype=torch.float32, enabled=self.autocast_enabled):
                losses["action_loss"] = self._action_loss(backbone.features, batch)
        if backbone.future_video_loss is not None:
            losses["future_video_loss"] = backbone.future_video_loss
        if not losses:
            raise ConfigError(
                "framework.cosmos25.training=video needs future frames, but the examples carry one frame each; give "
                "datasets.vla_data.video_delta_indices more than one frame, or train with training=joint or action"
            )
        return losses

    # no_grad, not inference_mode: real-time chunking's guidance takes a gradient through the head, which tensors
    # made under inference_mode (the features) refuse.
    @torch.no_grad()
    def predict_action(self, examples, generators: list[torch.Generator] | None = None,
                       **ignored_kwargs) -> dict[str, np.ndarray]:
        """{"normalized_actions": (B, action_horizon, action_dim) float32} from each example's current frame.
        `generators`: one CPU generator per example drawing all its noise, so its actions do not depend on the
        batch it is in; None draws from torch's default generator. Examples carrying `prev_actions` and
        `inference_delay` (checked by serving/policy.py) continue that chunk (real-time chunking, rtc.py)."""
        if self.action_model is None:
            raise ConfigError("framework.cosmos25.training=video builds no action head, so it cannot predict actions; "
                              "serve a run trained with training=joint or action")
        examples = [examples] if isinstance(examples, dict) else list(examples)
        batch = self._model_batch(examples, targets=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast_enabled):
            backbone = self.backbone_interface(batch.video, batch.instructions, want_features=True,
                                               want_video_loss=False, generators=generators, posterior=batch.posterior,
                                               prompt_embeds=batch.prompt_embeds)
        with torch.autocast("cuda", dtype=torch.float32, enabled=self.autocast_enabled):
            features = backbone.features.to(self.action_model.dtype)
            prefix = ChunkPrefix.of(examples, self.chunk_len, self.action_model.action_dim, features.device,
                                    features.dtype)
            actions = self.action_model.predict_action(features, batch.state, generators, prefix)
        return {"normalized_actions": actions.float().cpu().numpy()}

    @classmethod
    def from_pretrained(cls, checkpoint_pt_path: str | Path) -> "DiT4DiT":
        """The model of `<run_dir>/config.yaml` with `<run_dir>/<folder>/<name>.pt` loaded (left on the CPU); run
        folders of the original too (baseframework.from_pretrained, the one loader)."""
        from DiT4DiT.model.framework.base_framework import baseframework

        model = baseframework.from_pretrained(checkpoint_pt_path)
        if not isinstance(model, cls):
            raise ConfigError(f"{checkpoint_pt_path}: its run is a {type(model).__name__}, not a {cls.__name__}")
        return model
