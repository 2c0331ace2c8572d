"""Typed sections of the config, generated from DiT4DiT/config/schema.py by DiT4DiT/config/typed.py:
do not edit; regenerate with  python -m DiT4DiT.config.typed > DiT4DiT/config/sections.py
"""

# ruff: noqa: E501
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FrameworkCosmos25FlowMatchingSection:
    """framework.cosmos25.flow_matching"""

    time_distribution: Literal['logit_normal', 'uniform']  # video flow-matching time
    high_sigma_ratio: float | None  # probability of drawing t from [high_sigma_min, 1]; null disables
    high_sigma_min: float | None  # lower end of the high-sigma range (null when high_sigma_ratio is null)


@dataclass(frozen=True)
class FrameworkCosmos25Section:
    """framework.cosmos25"""

    base_model: str | None  # local folder of a diffusers Cosmos2_5_PredictBasePipeline snapshot
    local_files_only: bool  # never contact the hub; only local folders are read
    torch_dtype: Literal['bfloat16', 'float16', 'float32']  # dtype of every pipeline module
    attn_implementation: Literal['sdpa', 'eager', 'flash_attention_2']  # text-encoder attention; flash_attention_2 falls back to sdpa where flash-attn (CUDA) or torch_npu (Ascend) is absent
    extract_layer: int  # index of the transformer block whose output feeds the action head
    max_sequence_length: int  # prompt length in tokens (padded and truncated)
    vl_hidden_dim: int  # width of the backbone features (the transformer's hidden size)
    conditional_frame_timestep: float  # timestep given to the conditioning latent frame
    future_loss_type: Literal['flow_matching', 'latent_flow_matching', 'rectified_flow', 'rf', 'pixel_l1', 'pixel_mse', 'latent_mse']  # future-video loss
    future_num_inference_steps: int  # denoising steps of the pixel / latent future losses
    training: Literal['joint', 'action', 'video']  # joint (action + video losses), action (no video loss) or video (no action head)
    prompt_cache: bool  # run the text encoder once per unique instruction and reuse the embedding
    prompt_store_dir: str | None  # prompt-embedding store (default: <datasets.vla_data.cache_dir>/prompt_embeddings); local disk per node or a shared filesystem
    flow_matching: FrameworkCosmos25FlowMatchingSection


@dataclass(frozen=True)
class FrameworkActionModelDiffusionModelCfgSection:
    """framework.action_model.diffusion_model_cfg"""

    cross_attention_dim: int  # width of the backbone features the DiT attends to
    dropout: float  # dropout in attention outputs and feed-forward
    final_dropout: bool  # extra dropout after each attention
    interleave_self_attention: bool  # odd blocks self-attend, even blocks cross-attend
    num_layers: int  # number of DiT blocks
    output_dim: int  # DiT output width
    positional_embeddings: str | None  # per-block positional embedding (null = none)
    num_attention_heads: int | None  # override the size table's head count (tiny models)
    attention_head_dim: int | None  # override the size table's head width (tiny models)


@dataclass(frozen=True)
class FrameworkActionModelSection:
    """framework.action_model"""

    action_model_type: Literal['DiT-B', 'DiT-L']  # action DiT size: DiT-B (12x64) or DiT-L (32x48)
    hidden_size: int  # width of the state encoder and action decoder MLPs
    action_dim: int  # action width seen by the model (equals datasets.vla_data.max_action_dim)
    state_dim: int  # state width seen by the model (equals datasets.vla_data.max_state_dim); 0 = no state
    future_action_window_size: int  # action chunk = future_action_window_size + 1 steps
    action_horizon: int  # steps predicted at inference (future_action_window_size + 1)
    add_pos_embed: bool  # add a learned position embedding to the action tokens
    max_seq_len: int  # size of the action position-embedding table
    noise_beta_alpha: float  # alpha of the Beta flow-matching time distribution
    noise_beta_beta: float  # beta of the Beta flow-matching time distribution
    noise_s: float  # flow-matching time is Beta(alpha, beta) / noise_s
    num_timestep_buckets: int  # flow-matching time is quantised into this many buckets
    num_inference_timesteps: int  # Euler steps at inference
    diffusion_model_cfg: FrameworkActionModelDiffusionModelCfgSection


@dataclass(frozen=True)
class FrameworkSection:
    """framework"""

    name: str  # registered framework class to build
    cosmos25: FrameworkCosmos25Section
    action_model: FrameworkActionModelSection


@dataclass(frozen=True)
class DatasetsVlaDataSection:
    """datasets.vla_data"""

    data_root_dir: str | None  # folder holding the datasets of a named mixture (unused when data_mix is a path)
    data_mix: str  # named mixture, or a path: a LeRobot dataset folder, a folder of them, or a mixture file (YAML list of {path, weight, data_config})
    data_config: str  # data config of datasets given by path (a name in DiT4DiT/dataloader/data_configs.py, or auto = the one that fits the dataset's features); named mixtures keep their own
    views: Literal['auto', 'side_by_side', 'as_frames']  # how several cameras are combined: side_by_side (one wide frame per step), as_frames (each camera's frames as extra steps), auto = each data config's own layout (the original's)
    mask_padded_actions: bool  # action_mask is false for steps past an episode's end, so the action loss ignores them (the original trains on the repeated last action)
    statistics: Literal['computed', 'dataset']  # normalisation statistics: computed (exact, over every row) or dataset (the dataset's own meta/stats.json)
    per_device_batch_size: int  # samples per process per micro-step
    video_delta_indices: list[int]  # frame offsets fetched per sample (before subsampling)
    action_video_freq_ratio: int  # keep every n-th fetched frame
    max_state_dim: int  # state is zero-padded to this width
    max_action_dim: int  # action is zero-padded to this width
    image_size: int  # each camera view is resized to image_size x image_size (the original's [h, w] with h == w is accepted)
    video_backend: Literal['pyav', 'torchcodec']  # frame decoder: pyav or torchcodec (the original's torchvision_av, decord and opencv decode with pyav)
    num_workers: int  # DataLoader worker processes
    holdout_episodes: int  # episodes per dataset kept out of training for the eval action MSE (0 = none)
    cache_dir: str | None  # where statistics and step indexes are cached (default: ~/.cache/dit4dit)
    skip_non_finite_episodes: bool  # leave out episodes with NaN/Inf state or action values (counted) instead of stopping


@dataclass(frozen=True)
class DatasetsSection:
    """datasets"""

    vla_data: DatasetsVlaDataSection


@dataclass(frozen=True)
class TrainerSchedulerSpecificKwargsSection:
    """trainer.scheduler_specific_kwargs"""

    min_lr: float  # floor of the cosine schedule (as a rate relative to learning_rate.base)


@dataclass(frozen=True)
class TrainerOptimizerSection:
    """trainer.optimizer"""

    betas: list[float]  # AdamW betas
    eps: float  # AdamW epsilon
    weight_decay: float  # AdamW weight decay


@dataclass(frozen=True)
class TrainerLossScaleSection:
    """trainer.loss_scale"""

    future_video: float  # weight of the future-video loss in the total


@dataclass(frozen=True)
class TrainerClosedLoopEvalSection:
    """trainer.closed_loop_eval"""

    interval: int  # closed-loop success rate every n optimizer steps, on the checkpoint saved then, by a side process while training goes on (0 = off; a multiple of save_interval)
    task: str  # Meta-World v3 task it evaluates
    episodes: int  # episodes per evaluation (seeds seed..seed+episodes-1, the same at every step)
    max_steps: int  # env steps before an episode counts as a failure
    seed: int  # seed of the first episode (collect's demos use 0..)
    num_envs: int  # simulator processes of one evaluation
    device: Literal['cpu', 'auto', 'cuda', 'npu']  # device of the evaluation's policy server: cpu, or auto/cuda/npu for the run's kind of device
    threads: int  # OMP_NUM_THREADS of the side process (its server and simulators)
    python: str | None  # Python of the simulator environment (default: this checkout's .venv-metaworld/bin/python, `make sim-env`)
    evaluate_options: str | None  # scene options as `metaworld collect` got them, e.g. '--image_size 32'
    at_end: Literal['wait', 'cancel']  # the evaluation still running when training ends: wait for it, or cancel it


@dataclass(frozen=True)
class TrainerSection:
    """trainer"""

    max_train_steps: int  # optimizer steps to run
    num_warmup_steps: int  # linear learning-rate warm-up steps
    save_interval: int  # save a checkpoint every n optimizer steps
    eval_interval: int  # held-out action MSE every n optimizer steps
    logging_frequency: int  # log metrics every n optimizer steps
    learning_rate: dict[str, float]  # 'base' and one rate per named module
    lr_scheduler_type: Literal['cosine_with_min_lr', 'cosine_warmup_with_min_lr', 'linear', 'cosine', 'cosine_with_restarts', 'polynomial', 'constant', 'constant_with_warmup', 'inverse_sqrt']  # transformers scheduler name
    scheduler_specific_kwargs: TrainerSchedulerSpecificKwargsSection
    freeze_modules: str | None  # comma-separated module paths that are not trained
    repeated_diffusion_steps: int  # each sample is repeated this often in the action flow-matching loss
    gradient_clipping: float  # max global gradient norm
    gradient_accumulation_steps: int  # micro-steps per optimizer step
    optimizer: TrainerOptimizerSection
    loss_scale: TrainerLossScaleSection
    is_resume: bool  # continue the run in output_dir from its latest training state
    resume_weights_only: bool  # with is_resume and no training state: continue from the newest steps_N weights (step N, LR schedule fast-forwarded, fresh optimizer)
    resume_allow_changes: str | None  # comma-separated keys that may differ from the resumed run's config (e.g. seed)
    move_old_run: bool  # without is_resume: move an earlier run in the run dir aside to <run_id>.old-<time>
    pretrained_checkpoint: str | None  # weights (.pt) to start from
    reload_modules: str | None  # comma-separated module prefixes to load from pretrained_checkpoint (default: all)
    save_full_state_dict: bool  # checkpoints include frozen modules (text encoder, VAE) too
    keep_last_states: int  # training states kept for resume (older ones are deleted)
    allow_unsafe_zero_overlap: bool  # keep ZeRO-1/2 overlap_comm on a DeepSpeed before 0.19.0, which can corrupt gradients with it (off: it is turned off with a warning)
    mixed_precision: Literal['bf16', 'no']  # autocast dtype of every autocast site: bf16, or no (fp32 throughout)
    collective_timeout_s: int  # seconds a collective waits for the other ranks before the run fails
    stall_timeout_s: int  # a rank silent for this long (stopped, dead, cut off) ends the run with exit status 76 on every other rank (0 = off; keep it below collective_timeout_s)
    deterministic: bool  # deterministic kernels: torch.use_deterministic_algorithms(True), and through the launcher HCCL_DETERMINISTIC=true (NPU) or CUBLAS_WORKSPACE_CONFIG=:4096:8 (CUDA); slower (bench/device_check.py measures it)
    enable_gradient_checkpointing: bool  # recompute each Cosmos transformer block and action DiT block in the backward pass instead of keeping its activations (less memory, about one more forward of compute)
    ignore_resource_check: bool  # start even when the memory estimate exceeds what this machine has (experts: the estimate is conservative)
    closed_loop_eval: TrainerClosedLoopEvalSection


@dataclass(frozen=True)
class ConfigSections:
    """the whole config"""

    run_id: str  # name of the run; the run directory is <run_root_dir>/<run_id>
    run_root_dir: str  # parent folder of run directories
    seed: int  # base random seed (each process adds its rank); 3047 when a YAML sets none, as in the original
    trackers: list[str]  # metric sinks: any of jsonl, wandb
    wandb_entity: str | None  # wandb entity (team or user)
    wandb_project: str  # wandb project
    wandb_mode: Literal['offline', 'online', 'disabled'] | None  # wandb mode: offline, online or disabled (unset: $WANDB_MODE when exported, else offline)
    output_dir: str | None  # <run_root_dir>/<run_id>, derived when the config loads; setting it has no effect
    framework: FrameworkSection
    datasets: DatasetsSection
    trainer: TrainerSection
