"""Cosmos-Predict2.5 as the feature extractor of DiT4DiT.

One transformer step on [conditioning-frame latent, noise] gives the features of block `extract_layer`
(captured by a forward hook, detached; the pass stops there) that the action head attends to; a second,
flow-matching pass over the future frames' latents gives the video loss that trains the transformer.

The transformer's attention runs our processor (the end of this file), set through diffusers' processor API.

It computes what diffusers' CosmosAttnProcessor2_0 computes, with two differences that matter on an NPU:
- diffusers repeats K and V along dim 3 by head_dim(q) // head_dim(k/v) (its GQA step); in Cosmos the heads match,
  so the repeat is a copy of K and V by 1. torch_npu requires repeat_interleave outputs under 2**22 elements and
  the robotwin shape makes 9.6 M: we skip it when the factor is 1 and keep diffusers' repeat otherwise.
- RoPE (rotate-half layout, diffusers' use_real_unbind_dim=-2) runs as the operator torch.ops.npu.npu_rotary_mul
  on NPU tensors where torch_npu is loaded: one fused kernel instead of several float32 element-wise ones.
  Elsewhere it is diffusers' apply_rotary_emb. Both compute in float32, as diffusers does. The operator, not the
  attribute torch_npu.npu_rotary_mul: importing torch_npu.onnx replaces that attribute with an autograd.Function
  that has no backward; the operator carries its derivative (op-plugin derivatives.yaml).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import apply_rotary_emb
from diffusers.models.transformers.transformer_cosmos import CosmosAttnProcessor2_0
from diffusers.utils.torch_utils import randn_tensor
from torch import nn

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import FrameworkCosmos25Section
from DiT4DiT.facts import (FRAME_SIDE_MULTIPLE, SAMPLED_LOSS_TYPES, checkpointed_block_count, is_under,
                           latent_frame_count, module_paths)
from DiT4DiT.model.modules.activation_checkpointing import checkpoint_first
from DiT4DiT.model.modules.clip_encoding import ClipPosterior, clip_posterior, vae_frames
from DiT4DiT.model.modules.cosmos_pipeline import CosmosComponents, load_cosmos_components
from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape
from DiT4DiT.model.modules.host_to_device import stack_to_device, to_device
from DiT4DiT.model.modules.prompt_encoding import encode_prompts
from DiT4DiT.model.modules.latent_store import Episode, LatentStore, fill_latent_store
from DiT4DiT.model.modules.node_store import Ranks
from DiT4DiT.model.modules.prompt_store import FillReport, PromptStore, PromptStoreError, encoder_identity

log = logging.getLogger(__name__)

EXTRACTOR_PATH = "backbone_interface.extractor"


class FrameCountWarning(UserWarning):
    """The configured frame count leaves frames the VAE never sees."""


class _FeaturesCaptured(Exception):
    """Raised by the capture hook to end the feature pass after block `extract_layer`."""


@dataclass
class BackboneOutput:
    features: torch.Tensor | None  # (B, S, hidden), detached; None when not requested
    future_video_loss: torch.Tensor | None  # scalar; None when not computed


def unused_parameters_expected(freeze_modules: str | None, training: str) -> bool:
    """Whether a training step leaves some trainable parameter without a gradient (DDP must then look for them).

    The text encoder always has unused parts (its LM head, its vision tower), the VAE's decoder never runs, and
    in action mode the transformer runs only the no-grad feature pass; everything else gets a gradient.
    `freeze_modules`: trainer.freeze_modules; `training`: framework.cosmos25.training.
    """
    frozen = module_paths(freeze_modules)
    never_differentiated = [f"{EXTRACTOR_PATH}.text_encoder", f"{EXTRACTOR_PATH}.vae"]
    if training == "action":
        never_differentiated.append(f"{EXTRACTOR_PATH}.transformer")
    return any(not is_under(path, frozen) for path in never_differentiated)


def wasted_frames_message(num_frames: int, temporal_factor: int) -> str | None:
    """None when the VAE uses every frame, else what is dropped and which counts would use them all."""
    used = 1 + temporal_factor * ((num_frames - 1) // temporal_factor)
    if used == num_frames:
        return None
    dropped = f"frame {num_frames} is" if used + 1 == num_frames else f"frames {used + 1}-{num_frames} are"
    return (
        f"{num_frames} frames: the VAE uses 1+{temporal_factor}k frames, so {dropped} dropped; use {used} or "
        f"{used + temporal_factor} (set datasets.vla_data.video_delta_indices / action_video_freq_ratio)"
    )


def sample_flow_time(
    batch: int, distribution: str, high_sigma_ratio: float | None, high_sigma_min: float | None, device: torch.device
) -> torch.Tensor:
    """(batch,) float32 flow-matching times in [0, 1]; 1 is pure noise. `high_sigma_min` is None only with
    `high_sigma_ratio` off (config/validate.py)."""
    if distribution == "logit_normal":
        t = torch.sigmoid(torch.randn(batch, device=device))
    else:
        t = torch.rand(batch, device=device)
    if high_sigma_ratio:
        if high_sigma_min is None:
            raise ValueError(f"high_sigma_ratio={high_sigma_ratio} needs high_sigma_min (the config's check refuses "
                             "this pair)")
        high = torch.rand(batch, device=device) < high_sigma_ratio
        t = torch.where(high, high_sigma_min + (1.0 - high_sigma_min) * torch.rand(batch, device=device), t)
    return t


class CosmosFeatureExtractor(nn.Module):
    """Holds the Cosmos text encoder, VAE and transformer; computes features and the future-video loss."""

    def __init__(
        self,
        components: CosmosComponents,
        *,
        extract_layer: int,
        max_sequence_length: int,
        conditional_frame_timestep: float,
        time_distribution: str,
        high_sigma_ratio: float | None,
        high_sigma_min: float | None,
        prompt_store: PromptStore | None,
        early_exit: bool = True,
        future_loss_type: str = "flow_matching",
        future_num_inference_steps: int = 1,
        gradient_checkpointing: bool = False,
        gradient_checkpointing_blocks: str | None = None,
    ):
        super().__init__()
        self.text_encoder = components.text_encoder
        self.vae = components.vae
        self.transformer = components.transformer
        use_our_attention(self.transformer)  # diffusers' math without the no-op K/V copy; fused RoPE on NPU
        blocks = self.transformer.transformer_blocks
        recomputed = checkpointed_block_count(gradient_checkpointing_blocks, gradient_checkpointing, len(blocks))
        if recomputed:
            # diffusers' Cosmos transformer hands each block it runs with grad enabled (the video passes; the feature
            # pass runs under no_grad and keeps nothing) to our call: the first `recomputed` run again in backward.
            self.transformer.enable_gradient_checkpointing(checkpoint_first(blocks, recomputed))
        self.tokenizer = components.tokenizer
        self.scheduler = components.scheduler
        # Non-persistent buffers: they move with the model (no copy per step) and stay out of checkpoints (they
        # come from the VAE config). They hold the float32 bit pattern as int32, so a module-wide cast (DeepSpeed
        # bf16 calls module.bfloat16()) moves them but cannot round them.
        for name in ("latents_mean", "latents_std"):
            stats = getattr(components, name).to(torch.float32).contiguous()
            self.register_buffer(f"{name}_bits", stats.view(torch.int32), persistent=False)
        self.temporal_factor = components.vae_scale_factor_temporal
        self.spatial_factor = components.vae_scale_factor_spatial

        self.extract_layer = extract_layer
        self.max_sequence_length = max_sequence_length
        self.conditional_frame_timestep = conditional_frame_timestep
        self.time_distribution = time_distribution
        self.high_sigma_ratio = high_sigma_ratio
        self.high_sigma_min = high_sigma_min
        self.future_loss_type = future_loss_type
        self.future_num_inference_steps = future_num_inference_steps

        # The feature pass is the first step of a one-step sampling schedule (sigma = 200/201 for Cosmos 2.5).
        self.scheduler.set_timesteps(1)
        self.feature_sigma = float(self.scheduler.sigmas[0])

        # None = framework.cosmos25.prompt_cache off: the text encoder runs on every step, as in the original.
        self.prompt_store = prompt_store
        # The feature pass stops after block extract_layer: the later blocks' output is never used.
        self.early_exit = early_exit
        self._warned_trainable_text_encoder = False
        self._capturing = False
        self._in_feature_pass = False
        self._captured: torch.Tensor | None = None
        blocks = self.transformer.transformer_blocks
        blocks[extract_layer].register_forward_hook(self._capture_block_output)
        if extract_layer + 1 < len(blocks):
            blocks[extract_layer + 1].register_forward_pre_hook(self._stop_feature_pass)

    @property
    def latents_mean(self) -> torch.Tensor:
        """(1, z_dim, 1, 1, 1) float32 on the model's device."""
        return self.latents_mean_bits.view(torch.float32)

    @property
    def latents_std(self) -> torch.Tensor:
        """(1, z_dim, 1, 1, 1) float32 on the model's device: the std itself (diffusers 0.38 meaning)."""
        return self.latents_std_bits.view(torch.float32)

    def _capture_block_output(self, module, args, output) -> None:
        # Only the first transformer call of a forward (the feature pass) is captured.
        if self._capturing:
            self._captured = (output[0] if isinstance(output, tuple) else output).detach()
            self._capturing = False

    def _stop_feature_pass(self, module, args) -> None:
        # A pre-hook on the block after extract_layer: every hook of extract_layer itself has run by now.
        if self._in_feature_pass and self.early_exit:
            raise _FeaturesCaptured

    def _encode_prompts(self, prompts: list[str]) -> torch.Tensor:
        return encode_prompts(self.text_encoder, self.tokenizer, prompts, self.max_sequence_length)

    def _text_encoder_trainable(self) -> bool:
        return self.text_encoder is not None and any(p.requires_grad for p in self.text_encoder.parameters())

    def prepare_prompts(self, instructions, ranks: Ranks, release_encoder: bool) -> FillReport | None:
        """Store every instruction's embedding (split across ranks), then release the text encoder if asked."""
        if self.prompt_store is None:
            log.info("prompt store off (framework.cosmos25.prompt_cache=false): prompts are encoded every step")
            return None
        if self._text_encoder_trainable():
            log.info("prompt store unused: the text encoder is trainable, so prompts are encoded every step")
            return None
        report = self.prompt_store.fill(instructions, self._encode_prompts, ranks)
        if release_encoder:
            self._release_text_encoder()
        log.info(
            "prompt store: %d instructions, %d encoded now, %.1f MiB, at %s; text encoder %s",
            report.instructions, report.encoded, report.store_bytes / 2**20, report.folder,
            "released" if release_encoder else "kept (trainer.save_full_state_dict saves it)",
        )
        return report

    def _release_text_encoder(self) -> None:
        # Wrappers (DDP, DeepSpeed) keep references to every parameter, so dropping the module would free
        # nothing: each tensor's storage is replaced by an empty one first.
        for tensor in itertools.chain(self.text_encoder.parameters(), self.text_encoder.buffers()):
            tensor.data = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        self.text_encoder = None

    def stored_prompts(self, prompts: list[str]) -> list[torch.Tensor] | None:
        """Each prompt's stored embedding, on the host (memory-mapped), when the prompt store serves this batch: the
        store is on, the text encoder frozen and every prompt stored; host_to_device.model_batch moves them with the
        rest of the batch. None when the text encoder encodes them instead."""
        return self._stored_rows(prompts)

    def _stored_rows(self, prompts: list[str]) -> list[torch.Tensor] | None:
        # stored_prompts' body, called directly by prompt_embeddings: the stage clock (serving/stage_timing.py) times
        # the batch's lookup through stored_prompts, and this one inside the prompt stage it already times.
        store = self.prompt_store
        if store is not None and not self._text_encoder_trainable():
            missing = [p for p in dict.fromkeys(prompts) if not store.has(p)]
            if not missing:
                return [store.embedding(p) for p in prompts]
            if self.text_encoder is None:
                raise PromptStoreError(
                    f"instruction {missing[0]!r} is not in the prompt store {store.folder} and the text encoder was "
                    "released; every instruction the model will see must be passed to prepare_prompts"
                )
        elif store is not None and not self._warned_trainable_text_encoder:
            # A cached embedding has no graph, so a trainable text encoder would silently get no gradient.
            warnings.warn(
                "framework.cosmos25.prompt_cache is on but the text encoder is trainable, so prompts are encoded "
                "every step; add backbone_interface.extractor.text_encoder to trainer.freeze_modules to use the store",
                stacklevel=2,
            )
            self._warned_trainable_text_encoder = True
        return None

    def prompt_embeddings(self, prompts: list[str], device: torch.device) -> torch.Tensor:
        """(B, max_sequence_length, D) on `device`: the stored embeddings (for callers without a ModelBatch), else
        the text encoder's output."""
        stored = self._stored_rows(prompts)
        if stored is not None:
            return stack_to_device(stored, device)
        return self._encode_prompts(prompts).to(device)  # the encoder runs on the device: no host copy

    def _normalise(self, latents: torch.Tensor) -> torch.Tensor:
        return (latents.float() - self.latents_mean) / self.latents_std

    def clip_posterior(self, video: torch.Tensor, num_frames_out: int, with_future: bool) -> ClipPosterior:
        """What the latent store holds for a (B, T, 3, H, W) clip in [0, 1], and what training computes without it
        (clip_encoding.py)."""
        return clip_posterior(self.vae, video, num_frames_out, self.temporal_factor, with_future)

    def sample_condition(self, posterior: ClipPosterior, generators: list[torch.Generator] | None = None) -> torch.Tensor:
        """Normalised posterior sample of the conditioning frame, (B, C, 1, h, w) float32: mean + std x noise, the
        noise drawn as the VAE's own DiagonalGaussianDistribution.sample draws it (same shape, dtype, generators), so
        a stored posterior gives the same sample. `generators`: one per example (see forward)."""
        mean = posterior.mean[:, :, :1]
        noise = randn_tensor(mean.shape, generator=generators, device=mean.device, dtype=mean.dtype)
        return self._normalise(mean + posterior.std * noise)

    def forward(
        self,
        prompts: list[str],
        video: torch.Tensor | None,
        num_frames_out: int,
        want_features: bool = True,
        want_video_loss: bool = True,
        generators: list[torch.Generator] | None = None,
        posterior: ClipPosterior | None = None,
        prompt_embeds: torch.Tensor | None = None,
    ) -> BackboneOutput:
        """video (B, T, 3, H, W) in [0, 1] on the model's device: frame 0 conditions, the others are future frames;
        or, from the latent store, the clip's `posterior` in its place (video None). `prompt_embeds`: the prompts'
        stored embeddings as the ModelBatch brought them (None: looked up or encoded here).

        `generators` (CPU, one per example) draw each example's noise on its own, so an example's features do not
        depend on the batch it is in (the server batches requests); None draws from torch's default generator."""
        if posterior is not None:
            with_future = want_video_loss and posterior.mean.shape[2] > 1
        elif video is None:
            raise ValueError("the feature extractor needs the video or, from the latent store, its posterior")
        else:
            with_future = want_video_loss and video.shape[1] > 1
            height, width = video.shape[-2:]
            if height % FRAME_SIDE_MULTIPLE or width % FRAME_SIDE_MULTIPLE:
                raise ConfigError(
                    f"frame size {height}x{width} (HxW): Cosmos needs height and width that are multiples of "
                    f"{FRAME_SIDE_MULTIPLE}; set datasets.vla_data.image_size to a multiple of {FRAME_SIDE_MULTIPLE} (e.g. 224)"
                )
            posterior = self.clip_posterior(video, num_frames_out, with_future)
        device = posterior.mean.device
        dtype = self.transformer.dtype
        if prompt_embeds is None:
            prompt_embeds = self.prompt_embeddings(prompts, device)
        prompt_embeds = prompt_embeds.to(dtype)

        cond_latent = self.sample_condition(posterior, generators)
        batch, channels, _, latent_h, latent_w = cond_latent.shape
        num_latent = latent_frame_count(num_frames_out, self.temporal_factor)
        cond_latents = torch.cat(
            [cond_latent, cond_latent.new_zeros(batch, channels, num_latent - 1, latent_h, latent_w)], dim=2
        )
        cond_indicator = torch.zeros(1, 1, num_latent, 1, 1, device=device)
        cond_indicator[:, :, 0] = 1.0
        cond_mask = cond_indicator.expand(batch, 1, num_latent, latent_h, latent_w)
        padding_mask = torch.zeros(1, 1, latent_h * self.spatial_factor, latent_w * self.spatial_factor, device=device,
                                   dtype=dtype)

        def run_transformer(noisy: torch.Tensor, noise_level: torch.Tensor) -> torch.Tensor:
            latents = cond_mask * cond_latents + (1 - cond_mask) * noisy
            timestep = cond_indicator * self.conditional_frame_timestep + (1 - cond_indicator) * noise_level
            return self.transformer(
                hidden_states=latents.to(dtype),
                condition_mask=cond_mask.to(dtype),
                timestep=timestep.expand(batch, 1, num_latent, 1, 1),
                encoder_hidden_states=prompt_embeds,
                padding_mask=padding_mask,
                return_dict=False,
            )[0]

        features = None
        if want_features:
            noise = randn_tensor((batch, channels, num_latent, latent_h, latent_w), generator=generators, device=device)
            self._captured, self._capturing, self._in_feature_pass = None, True, True
            # Nothing but the (detached) hooked features is used from this pass, so it needs no graph.
            try:
                with torch.no_grad(), contextlib.suppress(_FeaturesCaptured):  # the pre-hook ends the pass early
                    run_transformer(noise, torch.full((batch, 1, 1, 1, 1), self.feature_sigma, device=device))
            finally:
                self._in_feature_pass = False
            features, self._captured, self._capturing = self._captured, None, False

        video_loss = None
        if with_future:
            if num_latent < 2:
                video_loss = torch.zeros((), device=device)
            elif self.future_loss_type in SAMPLED_LOSS_TYPES:
                video_loss = self._sampled_future_loss(posterior, video, cond_latents, run_transformer)
            else:
                video_loss = self._future_video_loss(posterior, cond_latents, run_transformer)
        return BackboneOutput(features=features, future_video_loss=video_loss)

    def _future_video_loss(self, posterior: ClipPosterior, cond_latents, run_transformer) -> torch.Tensor:
        batch, channels, num_latent, latent_h, latent_w = cond_latents.shape
        device = cond_latents.device
        targets = self._normalise(posterior.mean[:, :, 1:num_latent])
        supervised = targets.shape[2]

        t = sample_flow_time(batch, self.time_distribution, self.high_sigma_ratio, self.high_sigma_min, device)
        t = t.view(batch, 1, 1, 1, 1)
        noise = torch.randn_like(targets)
        noisy_targets = (1 - t) * targets + t * noise
        filler = torch.randn(batch, channels, num_latent, latent_h, latent_w, device=device)
        noisy = torch.cat([filler[:, :, :1], noisy_targets, filler[:, :, 1 + supervised :]], dim=2)
        velocity = run_transformer(noisy, t)
        return F.mse_loss(velocity[:, :, 1 : 1 + supervised].float(), (noise - targets).float())

    def sample_future_latents(self, cond_latents: torch.Tensor, run_transformer) -> torch.Tensor:
        """Normalised latents (B, C, T_lat, h, w) after `future_num_inference_steps` sampler steps from noise.

        As the diffusers Cosmos 2.5 pipeline (and the original): the transformer's output is the flow, and on the
        conditioning frame it is replaced by the flow that keeps that frame's latent. Not under no_grad: the
        sampled losses train the transformer through every step.
        """
        device = cond_latents.device
        self.scheduler.set_timesteps(self.future_num_inference_steps, device=device)
        latents = torch.randn_like(cond_latents)
        sigmas = to_device(self.scheduler.sigmas, device, torch.float32)  # schedulers keep them on the host
        keep = torch.zeros(1, 1, cond_latents.shape[2], 1, 1, device=device)
        keep[:, :, 0] = 1.0
        kept_flow = keep * (latents - cond_latents)
        for index, timestep in enumerate(self.scheduler.timesteps):
            flow = run_transformer(latents, sigmas[index])
            if self.scheduler.config.prediction_type == "flow_prediction":
                flow = kept_flow + (1 - keep) * flow.float()
            latents = self.scheduler.step(flow.float(), timestep, latents, return_dict=False)[0]
        self.scheduler.set_timesteps(1)  # the feature pass's one-step schedule again
        return latents

    def decode_video(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalised latents (B, C, T_lat, h, w) -> frames (B, 3, T, H, W) in [0, 1]."""
        denormalised = latents.float() * self.latents_std + self.latents_mean
        pixels = self.vae.decode(denormalised.to(self.vae.dtype), return_dict=False)[0]
        return ((pixels.float() + 1.0) / 2.0).clamp(0.0, 1.0)

    def _sampled_future_loss(self, posterior: ClipPosterior, video: torch.Tensor | None, cond_latents,
                             run_transformer) -> torch.Tensor:
        """latent_mse / pixel_l1 / pixel_mse on the future part of a sampled clip (the conditioning frame left out);
        the pixel losses compare with `video`'s frames (B, T, 3, H, W), so they need the video itself.

        Unlike the original: ground-truth frames always enter the VAE in [-1, 1] (its latent_mse passed them in
        [0, 1]), decoded frames always map from [-1, 1] (it guessed from their minimum), and only the frames the
        VAE represents are compared (it failed on clips longer than it decodes).
        """
        latents = self.sample_future_latents(cond_latents, run_transformer)
        if self.future_loss_type == "latent_mse":
            targets = self._normalise(posterior.mean[:, :, 1 : cond_latents.shape[2]])
            return F.mse_loss(latents[:, :, 1 : 1 + targets.shape[2]].float(), targets.float())
        if video is None:
            raise ConfigError(f"framework.cosmos25.future_loss_type={self.future_loss_type} compares decoded frames with "
                              "the video's pixels, which the latent store does not hold; set "
                              "framework.cosmos25.latent_cache=false or use a latent loss (flow_matching, latent_mse)")
        clip = vae_frames(video, self.temporal_factor, with_future=True)
        decoded = self.decode_video(latents)
        frames = min(decoded.shape[2], clip.shape[2]) - 1
        predicted, target = decoded[:, :, 1 : 1 + frames], (clip[:, :, 1 : 1 + frames].float() + 1.0) / 2.0
        if self.future_loss_type == "pixel_mse":
            return F.mse_loss(predicted, target)
        return (predicted - target).abs().mean()


class CosmosBackboneInterface(nn.Module):
    """Loads the pipeline that `framework.cosmos25` names and splits a batch's clip into the extractor's inputs.

    `num_frames_out` (frames per sample, from the data section), `prompt_store_dir` and `latent_store_dir` (where
    the stores live) and `gradient_checkpointing` / `gradient_checkpointing_blocks` (trainer.enable_gradient_checkpointing
    and trainer.gradient_checkpointing_blocks: which transformer blocks recompute) are the values it needs from outside
    its section; the framework passes them.
    """

    def __init__(self, cosmos: FrameworkCosmos25Section, num_frames_out: int, prompt_store_dir: Path,
                 gradient_checkpointing: bool = False, gradient_checkpointing_blocks: str | None = None,
                 latent_store_dir: Path | None = None):
        super().__init__()
        self.training_mode = cosmos.training
        self.base_model = cosmos.base_model_folder
        # None = framework.cosmos25.latent_cache off: every step decodes video and encodes it, as in the original.
        self.latent_store_dir = latent_store_dir if cosmos.latent_cache else None
        fm = cosmos.flow_matching
        # extract_layer, vl_hidden_dim and the frame count were checked against the folder's configs when the
        # config loaded (config/validate.py check_backbone_fits).
        shape = read_pipeline_shape(self.base_model)
        self.num_frames_out = num_frames_out
        message = wasted_frames_message(self.num_frames_out, shape.temporal_factor)
        if message is not None:
            warnings.warn(message, FrameCountWarning, stacklevel=2)

        components = load_cosmos_components(
            self.base_model, cosmos.torch_dtype, cosmos.attn_implementation, cosmos.local_files_only
        )
        store = None
        if cosmos.prompt_cache:
            store = PromptStore(prompt_store_dir, encoder_identity(self.base_model), cosmos.max_sequence_length,
                                components.text_encoder.dtype)
        self.extractor = CosmosFeatureExtractor(
            components,
            extract_layer=cosmos.extract_layer,
            max_sequence_length=cosmos.max_sequence_length,
            conditional_frame_timestep=cosmos.conditional_frame_timestep,
            time_distribution=fm.time_distribution,
            high_sigma_ratio=fm.high_sigma_ratio,
            high_sigma_min=fm.high_sigma_min,
            prompt_store=store,
            future_loss_type=cosmos.future_loss_type,
            future_num_inference_steps=cosmos.future_num_inference_steps,
            gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_blocks=gradient_checkpointing_blocks,
        )

    @property
    def device(self) -> torch.device:
        """Where the model's inputs go: the transformer's device."""
        return next(self.extractor.transformer.parameters()).device

    def prepare_latents(self, episodes: list[Episode], layout: dict, ranks: Ranks, batch_size: int,
                        mixed_precision: str) -> LatentStore | None:
        """Every episode's clips into the latent store (latent_store.fill_latent_store), before step 1; the filled
        store, or None when framework.cosmos25.latent_cache is off. `layout`: MixtureDataset.sample_layout()."""
        if self.latent_store_dir is None:
            log.info("latent store off (framework.cosmos25.latent_cache=false): every step decodes and encodes video")
            return None
        store, _ = fill_latent_store(self.extractor.vae, episodes, store_dir=self.latent_store_dir,
                                     base_model=self.base_model, layout=layout, num_frames_out=self.num_frames_out,
                                     temporal_factor=self.extractor.temporal_factor,
                                     with_future=self.training_mode != "action", ranks=ranks,
                                     batch_size=batch_size, mixed_precision=mixed_precision)
        return store

    def _check_frames(self, video: torch.Tensor) -> None:
        """A (B, T, 3, H, W) clip carries the config's frames per camera (or one, the current frame)."""
        num_frames = video.shape[1]
        # datasets.vla_data.views=as_frames puts each camera's frames after the previous one's: a whole multiple.
        if num_frames > 1 and num_frames % self.num_frames_out:
            raise ConfigError(
                f"samples carry {num_frames} frames but the config gives {self.num_frames_out} per camera "
                "(datasets.vla_data.video_delta_indices subsampled by action_video_freq_ratio); send that many "
                "frames per camera, or serve the run whose config matches the frames"
            )

    def forward(
        self, video: torch.Tensor | None, instructions: list[str], want_features: bool, want_video_loss: bool,
        generators: list[torch.Generator] | None = None, posterior: ClipPosterior | None = None,
        prompt_embeds: torch.Tensor | None = None,
    ) -> BackboneOutput:
        """video (B, T, 3, H, W) in [0, 1] on the model's device (frame 0 conditions), or its stored `posterior`
        (the latent store) in its place; instructions[b] = sample b's language instruction; generators[b], when
        given, draws sample b's noise; `prompt_embeds`: the instructions' stored embeddings from the ModelBatch."""
        if posterior is None:
            self._check_frames(video)
        return self.extractor(
            list(instructions),
            video,
            self.num_frames_out,
            want_features=want_features,
            want_video_loss=want_video_loss,
            generators=generators,
            posterior=posterior,
            prompt_embeds=prompt_embeds,
        )


def _repeat_kv(kv: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """diffusers' K/V repeat, skipped when it would repeat by 1 (a copy that changes nothing)."""
    factor = query.size(3) // kv.size(3)
    return kv if factor == 1 else kv.repeat_interleave(factor, dim=3)


class CosmosAttnProcessor:
    """CosmosAttnProcessor2_0's math without the no-op K/V repeat, with fused RoPE when `rotary_mul` is given."""

    def __init__(self, rotary_mul: Callable | None = None):
        self.rotary_mul = rotary_mul  # torch.ops.npu.npu_rotary_mul(x, cos, sin): x*cos + rotate_half(x)*sin

    def _rope(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if self.rotary_mul is None or x.device.type == "cpu":  # torch_npu's kernels run on NPU tensors only
            return apply_rotary_emb(x, cos_sin, use_real=True, use_real_unbind_dim=-2)
        cos, sin = (t[None, None].to(x.device) for t in cos_sin)  # (S, D) -> (1, 1, S, D), as diffusers broadcasts
        return self.rotary_mul(x.float(), cos, sin).to(x.dtype)

    def __call__(
        self,
        attn: Attention,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        # (B, S, heads * head_dim) -> (B, heads, S, head_dim)
        query = attn.to_q(hidden_states).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        key = attn.to_k(context).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        value = attn.to_v(context).unflatten(2, (attn.heads, -1)).transpose(1, 2)
        query, key = attn.norm_q(query), attn.norm_k(key)
        if image_rotary_emb is not None:
            query, key = self._rope(query, image_rotary_emb), self._rope(key, image_rotary_emb)
        key, value = _repeat_kv(key, query), _repeat_kv(value, query)
        out = dispatch_attention_fn(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                    attn_mask=attention_mask, dropout_p=0.0, is_causal=False)
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def fused_rotary_mul() -> Callable | None:
    """torch_npu's fused RoPE as the operator with its derivative, or None where torch_npu is not loaded (the NPU
    patch or serving's device seam loads it, never this module)."""
    if "torch_npu" not in sys.modules:
        return None
    return getattr(torch.ops.npu, "npu_rotary_mul", None)


def use_our_attention(transformer: torch.nn.Module) -> int:
    """Give every attention module of `transformer` that runs diffusers' CosmosAttnProcessor2_0 our processor
    (Attention.set_processor); the image-context CosmosAttention keeps its own. Returns how many were replaced."""
    processor = CosmosAttnProcessor(fused_rotary_mul())
    replaced = 0
    for module in transformer.modules():
        if isinstance(module, Attention) and isinstance(module.processor, CosmosAttnProcessor2_0):
            module.set_processor(processor)
            replaced += 1
    return replaced
