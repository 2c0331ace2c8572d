"""Rules between keys, checked when a config loads, and whether the base model folder fits the backbone keys.

Single-key rules (type, choices, bounds) are declared with each key in DiT4DiT/config/sections.py. The data keys
against the data registry are checked by DiT4DiT/dataloader/config_checks.py, and the whole of a training
launch's inputs by DiT4DiT/training/input_checks.py, both above this package.
"""

from __future__ import annotations

from pathlib import Path

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.paths import resolved
from DiT4DiT.config.sections import ConfigSections
from DiT4DiT.facts import (AUTO, FRAME_SIDE_MULTIPLE, PIXEL_LOSS_TYPES, VAE_MODULE, is_under, latent_frame_count,
                           module_paths)
from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape

MAX_NAME_BYTES = 255  # NAME_MAX of ext4, xfs, btrfs


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _is_count(text: str) -> bool:
    """Whether `text` is a whole number in ASCII digits: str.isdigit() also takes '²', which int() refuses."""
    return text.isascii() and text.isdigit()


def has_action_head(cfg: ConfigSections) -> bool:
    return cfg.framework.cosmos25.training != "video"


def action_chunk(cfg: ConfigSections) -> int | None:
    """The steps of the action chunk the head predicts; None without an action head."""
    return cfg.framework.action_model.chunk_length if has_action_head(cfg) else None


def check_action_dims(cfg: ConfigSections) -> None:
    """The action head is built at the padded widths: the data loader pads to max_*_dim before the model."""
    head, data = cfg.framework.action_model, cfg.datasets.vla_data
    _require(head.action_dim == data.max_action_dim,
             f"framework.action_model.action_dim={head.action_dim} must equal "
             f"datasets.vla_data.max_action_dim={data.max_action_dim} (actions are padded to that width)")
    _require(not head.state_dim or head.state_dim == data.max_state_dim,
             f"framework.action_model.state_dim={head.state_dim} must equal "
             f"datasets.vla_data.max_state_dim={data.max_state_dim} (or 0 for no state)")


def run_dir_of(run_root_dir: str, run_id: str) -> Path:
    """<run_root_dir>/<run_id>, where run_id is one folder name that stays inside run_root_dir."""
    bad = next((part for part in ("/", "\\", "\0") if part in run_id), None)
    reason = f"it contains {bad!r}" if bad else "it names no folder of its own"
    _require(run_id not in ("", ".", "..") and bad is None,
             f"run_id {run_id!r} is not a folder name ({reason}); a run id is one path component such as my_run_01 "
             "(choose the parent folder with --run_root_dir)")
    _require(len(run_id.encode()) <= MAX_NAME_BYTES,
             f"run_id of {len(run_id)} characters ({len(run_id.encode())} bytes): a folder name is at most "
             f"{MAX_NAME_BYTES} bytes on Linux file systems; pick a shorter --run_id")
    root = Path(run_root_dir)
    root_path, run_path = resolved(root, "run_root_dir"), resolved(root / run_id, "run_id")
    _require(root_path in run_path.parents,
             f"run_id {run_id!r}: {root / run_id} resolves to {run_path}, outside run_root_dir "
             f"{root_path} (a symbolic link?); pick another --run_id")
    return root / run_id


def profiled_steps(text: str | None) -> tuple[int, int] | None:
    """trainer.profile_steps "a,b" (or "a", one step) as (first, last) optimizer step; None when unset."""
    if text is None or str(text).strip() == "":
        return None
    parts = [p.strip() for p in str(text).split(",")]
    _require(len(parts) in (1, 2) and all(_is_count(p) for p in parts),
             f"trainer.profile_steps={text!r}: give the first and last optimizer step to profile, e.g. 10,12 (or one "
             "step, e.g. 10)")
    first, last = int(parts[0]), int(parts[-1])
    _require(1 <= first <= last, f"trainer.profile_steps={text!r}: steps count from 1, and the first comes first")
    return first, last


def latent_cache_refusal(cfg: ConfigSections) -> str | None:
    """Why framework.cosmos25.latent_cache cannot hold this run's VAE outputs (one line), or None when it can. A
    random image augmentation is the data's to say (DiT4DiT/dataloader/config_checks.py)."""
    cosmos = cfg.framework.cosmos25
    if not is_under(VAE_MODULE, module_paths(cfg.trainer.freeze_modules)):
        return (f"framework.cosmos25.latent_cache needs a frozen VAE (a stored posterior carries no gradient): add "
                f"{VAE_MODULE} to trainer.freeze_modules, or set latent_cache=false")
    if cosmos.training != "action" and cosmos.future_loss_type in PIXEL_LOSS_TYPES:
        return (f"framework.cosmos25.latent_cache: future_loss_type={cosmos.future_loss_type} compares decoded frames "
                "with the video's pixels, which the store does not hold; use a latent loss (flow_matching, latent_mse) "
                "or set latent_cache=false")
    return None


def check_rules(cfg: ConfigSections) -> None:
    """Every rule that ties keys together; ConfigError with what to set for the first one broken."""
    cosmos, head, data, trainer = cfg.framework.cosmos25, cfg.framework.action_model, cfg.datasets.vla_data, cfg.trainer
    if has_action_head(cfg):
        check_action_dims(cfg)
        chunk = head.chunk_length
        _require(head.action_horizon == chunk,
                 f"framework.action_model.action_horizon ({head.action_horizon}) must equal "
                 f"future_action_window_size + 1 ({chunk}): the eval compares "
                 "predicted chunks with data chunks of that length")
        dit = head.diffusion_model_cfg
        _require(dit.cross_attention_dim == cosmos.vl_hidden_dim,
                 f"framework.action_model.diffusion_model_cfg.cross_attention_dim={dit.cross_attention_dim} must equal "
                 f"framework.cosmos25.vl_hidden_dim={cosmos.vl_hidden_dim} (the DiT attends to the backbone features)")
        _require(dit.output_dim == head.hidden_size,
                 f"framework.action_model.diffusion_model_cfg.output_dim={dit.output_dim} must equal "
                 f"framework.action_model.hidden_size={head.hidden_size} (the action decoder reads the DiT output)")
        _require(not head.add_pos_embed or head.action_horizon <= head.max_seq_len,
                 f"framework.action_model.max_seq_len={head.max_seq_len} is shorter than the action chunk "
                 f"({head.action_horizon}); raise it")
        _require((dit.num_attention_heads is None) == (dit.attention_head_dim is None),
                 "framework.action_model.diffusion_model_cfg.num_attention_heads and attention_head_dim override the "
                 "size table together: set both or neither")
        _require(dit.positional_embeddings is None,
                 "framework.action_model.diffusion_model_cfg.positional_embeddings: only null is supported")
        rtc = head.rtc_training
        _require(not rtc.enabled or rtc.max_delay < chunk,
                 f"framework.action_model.rtc_training.max_delay={rtc.max_delay} must be below the action chunk "
                 f"({chunk} steps): a delay of the whole chunk leaves nothing to predict; lower it (at most "
                 f"{chunk // 2} keeps a delay within half the chunk, as real-time chunking assumes)")
    fm = cosmos.flow_matching
    _require(not fm.high_sigma_ratio or fm.high_sigma_min is not None,
             f"framework.cosmos25.flow_matching.high_sigma_min is null but high_sigma_ratio={fm.high_sigma_ratio}; "
             "set high_sigma_min (e.g. 0.98) or set high_sigma_ratio to null")
    _require(data.image_size % FRAME_SIDE_MULTIPLE == 0,
             f"datasets.vla_data.image_size={data.image_size}: Cosmos needs frame sides that are multiples of "
             f"{FRAME_SIDE_MULTIPLE}; use e.g. {max(FRAME_SIDE_MULTIPLE, data.image_size // FRAME_SIDE_MULTIPLE * FRAME_SIDE_MULTIPLE)}")
    _require(len(data.video_delta_indices) >= 1, "datasets.vla_data.video_delta_indices: give at least one frame offset")
    blocks = trainer.gradient_checkpointing_blocks
    _require(blocks is None or blocks == AUTO or _is_count(str(blocks)),
             f"trainer.gradient_checkpointing_blocks={blocks!r}: give a count of blocks (e.g. 14), auto (the fewest the "
             "memory plan needs on this device) or null (as trainer.enable_gradient_checkpointing says)")
    profiled = profiled_steps(trainer.profile_steps)
    _require(profiled is None or profiled[1] <= trainer.max_train_steps,
             f"trainer.profile_steps={trainer.profile_steps}: the run ends at step {trainer.max_train_steps}; profile "
             "steps within it")
    refusal = latent_cache_refusal(cfg) if cosmos.latent_cache else None
    _require(refusal is None, str(refusal))
    _require(not (trainer.is_resume and trainer.pretrained_checkpoint),
             "trainer.is_resume and trainer.pretrained_checkpoint are both set: resume continues this run's "
             "own training state; unset one of them")
    _require(trainer.is_resume or not trainer.resume_weights_only,
             "trainer.resume_weights_only only applies with --trainer.is_resume true")
    _require(not (trainer.is_resume and trainer.move_old_run),
             "trainer.move_old_run and trainer.is_resume are both set: resume continues the run in the run dir, "
             "move_old_run starts a new one there; unset one of them")


def check_backbone_fits(cfg: ConfigSections) -> None:
    """The backbone keys agree with the sizes the (complete) base model folder's configs declare."""
    cosmos, data = cfg.framework.cosmos25, cfg.datasets.vla_data
    shape = read_pipeline_shape(cosmos.base_model_folder)
    _require(0 <= cosmos.extract_layer < shape.num_blocks,
             f"framework.cosmos25.extract_layer={cosmos.extract_layer} is out of range: the transformer has "
             f"{shape.num_blocks} blocks, so the valid range is 0..{shape.num_blocks - 1}")
    _require(cosmos.vl_hidden_dim == shape.hidden_size,
             f"framework.cosmos25.vl_hidden_dim={cosmos.vl_hidden_dim} but the transformer in {cosmos.base_model} "
             f"is {shape.hidden_size} wide; set vl_hidden_dim to {shape.hidden_size}")
    blocks = cfg.trainer.gradient_checkpointing_blocks
    _require(blocks in (None, AUTO) or int(blocks) <= shape.num_blocks,
             f"trainer.gradient_checkpointing_blocks={blocks}: the transformer in {cosmos.base_model} has "
             f"{shape.num_blocks} blocks; give at most {shape.num_blocks}")
    frames = data.num_frames
    # joint and video train the transformer only through the future frames: with none, nothing reaches it, and
    # DDP stops at the second step with "parameters that were not used in producing loss".
    _require(cosmos.training == "action" or latent_frame_count(frames, shape.temporal_factor) >= 2,
             f"framework.cosmos25.training={cosmos.training} needs at least {1 + shape.temporal_factor} frames per "
             f"sample (its video loss predicts the frames after the first), but datasets.vla_data.video_delta_indices "
             f"/ action_video_freq_ratio give {frames}"
             + ("; to train the action head alone on one frame, set framework.cosmos25.training=action"
                if cosmos.training == "joint" else ""))
