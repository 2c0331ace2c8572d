"""The config's schema: one frozen dataclass per section, each key declared once as a typed field.

A field's annotation is its type (`X | None`: null is allowed, `Literal[...]`: its choices); `key(default, help,
...)` gives its default, one-line meaning, bounds with their reason and the original's spellings of a value.
`load_config` (DiT4DiT/config/schema.py) checks a YAML and the command line against these classes and returns
the whole tree as a ConfigSections; every component takes the sections it reads from it. Quantities derived from
several keys are properties or methods here, each computed in this one place (the global batch, the run folder, the
store folders, the frames a sample carries, the scaled video loss).
Keys are the original DiT4DiT's, so its configs and launch flags carry over; each class also names the keys the
original's YAMLs carry without reading them (UNREAD_BY_THE_ORIGINAL: accepted with one warning, dropped) and the
keys the original reads and this trainer does not (READ_BY_THE_ORIGINAL_ONLY: accepted, dropped, and written into
a run's config.yaml with the value in use here, the original's default, so the original's from_pretrained and
training find every key they ask for).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

from omegaconf.errors import ReadonlyConfigError

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.keys import Key, key, open_node
from DiT4DiT.config.paths import StoreKind, store_root

MAX_SEED = 2**32 - 1  # numpy's seed range (set_seed seeds numpy with seed + rank)
# Upper bounds: values past them are typos that would otherwise exhaust memory or overflow a timer.
MAX_STEPS, STEPS_WHY = 100_000_000, "1e8 steps at 1 s each is three years; a larger count is a typo"
MAX_SEQUENCE_LENGTH = 4096  # prompt tokens: each prompt's text-encoder output grows with it; the original uses 512
MAX_TIMEOUT_S, TIMEOUT_WHY = 86_400, "a day: a hung rank holds every device this long, and torch's timer overflows past it"
FutureLossType = Literal["flow_matching", "latent_flow_matching", "rectified_flow", "rf", "pixel_l1", "pixel_mse",
                         "latent_mse"]
# transformers' get_scheduler names that need nothing beyond warm-up and total steps (and the cosine floor);
# reduce_lr_on_plateau (a metric per step) and warmup_stable_decay (decay steps) do not fit the loop.
LrSchedulerType = Literal["cosine_with_min_lr", "cosine_warmup_with_min_lr", "linear", "cosine", "cosine_with_restarts",
                          "polynomial", "constant", "constant_with_warmup", "inverse_sqrt"]
MIN_LR_SCHEDULERS = ("cosine_with_min_lr", "cosine_warmup_with_min_lr")  # read scheduler_specific_kwargs.min_lr
EvaluationDevice = Literal["auto", "npu", "cuda", "cpu"]  # auto: the run's kind of device (facts.DEVICE_KINDS)
# The original's decoders: decord has no aarch64 wheels and torchvision's reader is deprecated; PyAV reads the
# same frames (torchvision_av is PyAV underneath).
VIDEO_BACKEND_ALIASES = {"torchvision_av": "pyav", "decord": "pyav", "opencv": "pyav"}


class ReadOnlyConfigError(FrozenInstanceError, ReadonlyConfigError):
    """A key of a loaded config set: it was checked once, so nothing may change it (the error the read-only tree
    raised before, for callers that catch it)."""


class Section:
    """What every section shares with the loaded tree it replaces: `"key" in section` asks whether it has that key,
    and setting a key is a ReadOnlyConfigError."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in {f.name for f in fields(self)}  # type: ignore[arg-type]


T = TypeVar("T")


def read_only(cls: type[T]) -> type[T]:
    """Setting or deleting a field of `cls` (a frozen dataclass) raises ReadOnlyConfigError."""

    def refuse(self: object, name: str, *value: object) -> None:
        raise ReadOnlyConfigError(f"{type(self).__name__}: '{name}' cannot be changed; the config is read-only once "
                                  "loaded (set it in the YAML or on the command line)")

    cls.__setattr__ = refuse  # type: ignore[method-assign]
    cls.__delattr__ = refuse  # type: ignore[method-assign]
    return cls


@read_only
@dataclass(frozen=True)
class FrameworkCosmos25FlowMatchingSection(Section):
    """framework.cosmos25.flow_matching"""

    time_distribution: Literal["logit_normal", "uniform"] = key("logit_normal", "video flow-matching time")
    high_sigma_ratio: float | None = key(0.05, "probability of drawing t from [high_sigma_min, 1]; null disables",
                                         min=0.0, max=1.0)
    high_sigma_min: float | None = key(0.98, "lower end of the high-sigma range (null when high_sigma_ratio is null)",
                                       min=0.0, max=1.0)


@read_only
@dataclass(frozen=True)
class FrameworkCosmos25Section(Section):
    """framework.cosmos25"""

    READ_BY_THE_ORIGINAL_ONLY: ClassVar[dict[str, object]] = {"revision": "diffusers/base/post-trained"}

    base_model: str | None = key(None, "local folder of a diffusers Cosmos2_5_PredictBasePipeline snapshot")
    local_files_only: bool = key(True, "never contact the hub; only local folders are read")
    torch_dtype: Literal["bfloat16", "float16", "float32"] = key("bfloat16", "dtype of every pipeline module")
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = key(
        "sdpa", "text-encoder attention; flash_attention_2 falls back to sdpa where flash-attn (CUDA) or torch_npu "
        "(Ascend) is absent")
    extract_layer: int = key(19, "index of the transformer block whose output feeds the action head", min=0)
    max_sequence_length: int = key(512, "prompt length in tokens (padded and truncated)", min=1,
                                   max=MAX_SEQUENCE_LENGTH,
                                   why="each prompt's text-encoder output grows with it; the original uses 512")
    vl_hidden_dim: int = key(2048, "width of the backbone features (the transformer's hidden size)", min=1)
    conditional_frame_timestep: float = key(0.001, "timestep given to the conditioning latent frame", min=0.0)
    future_loss_type: FutureLossType = key("pixel_l1", "future-video loss")
    future_num_inference_steps: int = key(2, "denoising steps of the pixel / latent future losses", min=1)
    training: Literal["joint", "action", "video"] = key(
        "joint", "joint (action + video losses), action (no video loss) or video (no action head)")
    prompt_cache: bool = key(True, "run the text encoder once per unique instruction and reuse the embedding")
    prompt_store_dir: str | None = key(None, "prompt-embedding store (default: <datasets.vla_data.cache_dir>/"
                                       "prompt_embeddings); local disk per node or a shared filesystem")
    latent_cache: bool = key(False, "encode every clip a sample can draw once with the frozen VAE (before step 1, or "
                             "python -m DiT4DiT.tools.latent_store) and train from the stored posteriors: no video "
                             "decode and no VAE per step; needs a frozen VAE, a latent future loss and no random image "
                             "augmentation")
    latent_store_dir: str | None = key(None, "VAE latent store (default: <datasets.vla_data.cache_dir>/vae_latents); "
                                       "local disk per node or a shared filesystem")
    flow_matching: FrameworkCosmos25FlowMatchingSection = field(default_factory=FrameworkCosmos25FlowMatchingSection)

    @property
    def base_model_folder(self) -> Path:
        """base_model as a path; a ConfigError when it is unset (whatever reads the snapshot needs it)."""
        if self.base_model is None:
            raise ConfigError("framework.cosmos25.base_model is not set; give the Cosmos-Predict2.5 snapshot folder "
                              "(--framework.cosmos25.base_model DIR)")
        return Path(self.base_model)


@read_only
@dataclass(frozen=True)
class FrameworkActionModelDiffusionModelCfgSection(Section):
    """framework.action_model.diffusion_model_cfg"""

    READ_BY_THE_ORIGINAL_ONLY: ClassVar[dict[str, object]] = {"norm_type": "ada_norm"}  # the only block norm here

    cross_attention_dim: int = key(2048, "width of the backbone features the DiT attends to", min=1)
    dropout: float = key(0.2, "dropout in attention outputs and feed-forward", min=0.0, max=1.0)
    final_dropout: bool = key(True, "extra dropout after each attention")
    interleave_self_attention: bool = key(True, "odd blocks self-attend, even blocks cross-attend")
    num_layers: int = key(16, "number of DiT blocks", min=1)
    output_dim: int = key(2560, "DiT output width", min=1)
    positional_embeddings: str | None = key(None, "per-block positional embedding (null = none)")
    num_attention_heads: int | None = key(None, "override the size table's head count (tiny models)", min=1)
    attention_head_dim: int | None = key(None, "override the size table's head width (tiny models)", min=1)


@read_only
@dataclass(frozen=True)
class FrameworkActionModelRtcTrainingSection(Section):
    """framework.action_model.rtc_training"""

    enabled: bool = key(False, "training-time real-time chunking: per example a delay d is drawn, the first d actions "
                        "are given clean (flow time 0) and left out of the loss, so a served chunk continues the "
                        "previous one exactly (docs/serving.md)")
    max_delay: int = key(4, "largest delay d drawn, in actions; below the chunk length", min=1)
    distribution: Literal["uniform", "exponential"] = key(
        "uniform", "how d is drawn from 0..max_delay: uniform, or exponential (P(d) proportional to "
        "exp(-d / temperature), more small delays)")
    temperature: float = key(1.0, "exponential distribution's scale, in actions (larger flattens it)", min=0.01,
                             why="P(d) is proportional to exp(-d / temperature); below 0.01 only d = 0 is ever drawn")


@read_only
@dataclass(frozen=True)
class FrameworkActionModelSection(Section):
    """framework.action_model"""

    UNREAD_BY_THE_ORIGINAL: ClassVar[tuple[str, ...]] = (
        "repeated_diffusion_steps",  # the original reads trainer.repeated_diffusion_steps
        "num_target_vision_tokens",
    )
    READ_BY_THE_ORIGINAL_ONLY: ClassVar[dict[str, object]] = {"past_action_window_size": 0}  # the head has no past actions

    action_model_type: Literal["DiT-B", "DiT-L"] = key("DiT-B", "action DiT size: DiT-B (12x64) or DiT-L (32x48)")
    hidden_size: int = key(2560, "width of the state encoder and action decoder MLPs", min=1)
    action_dim: int = key(32, "action width seen by the model (equals datasets.vla_data.max_action_dim)", min=1)
    state_dim: int = key(64, "state width seen by the model (equals datasets.vla_data.max_state_dim); 0 = no state",
                         min=0)
    future_action_window_size: int = key(7, "action chunk = future_action_window_size + 1 steps", min=0)
    action_horizon: int = key(8, "steps predicted at inference (future_action_window_size + 1)", min=1)
    add_pos_embed: bool = key(True, "add a learned position embedding to the action tokens")
    max_seq_len: int = key(1024, "size of the action position-embedding table", min=1)
    noise_beta_alpha: float = key(1.5, "alpha of the Beta flow-matching time distribution", min=0.0)
    noise_beta_beta: float = key(1.0, "beta of the Beta flow-matching time distribution", min=0.0)
    noise_s: float = key(0.999, "flow-matching time is Beta(alpha, beta) / noise_s", min=0.0, max=1.0)
    num_timestep_buckets: int = key(1000, "flow-matching time is quantised into this many buckets", min=1)
    num_inference_timesteps: int = key(4, "Euler steps at inference", min=1)
    diffusion_model_cfg: FrameworkActionModelDiffusionModelCfgSection = field(
        default_factory=FrameworkActionModelDiffusionModelCfgSection)
    rtc_training: FrameworkActionModelRtcTrainingSection = field(
        default_factory=FrameworkActionModelRtcTrainingSection)

    @property
    def chunk_length(self) -> int:
        """Steps in the action chunk the data yields and the head is trained on."""
        return self.future_action_window_size + 1


@read_only
@dataclass(frozen=True)
class FrameworkSection(Section):
    """framework"""

    name: str = key("DiT4DiT", "registered framework class to build")
    cosmos25: FrameworkCosmos25Section = field(default_factory=FrameworkCosmos25Section)
    action_model: FrameworkActionModelSection = field(default_factory=FrameworkActionModelSection)


@read_only
@dataclass(frozen=True)
class DatasetsVlaDataImageAugmentationSection(Section):
    """datasets.vla_data.image_augmentation"""

    apply: Literal["data_config", "all", "none"] = key(
        "data_config", "whose training frames are augmented: data_config (each data config's own, as the original: "
        "oxe_droid crops and jitters, the others do nothing), all (every dataset, with the values below) or none")
    crop_scale: float = key(0.95, "crop this share of each side (random in training, centred at evaluation), then "
                            "resize to image_size", min=0.01, max=1.0)
    brightness: float = key(0.3, "training brightness factor drawn from [1 - x, 1 + x]", min=0.0)
    contrast: float = key(0.4, "training contrast factor drawn from [1 - x, 1 + x]", min=0.0)
    saturation: float = key(0.5, "training saturation factor drawn from [1 - x, 1 + x]", min=0.0)
    hue: float = key(0.08, "training hue shift drawn from [-x, x] (of a full turn)", min=0.0, max=0.5)


@read_only
@dataclass(frozen=True)
class DatasetsVlaDataSection(Section):
    """datasets.vla_data"""

    UNREAD_BY_THE_ORIGINAL: ClassVar[tuple[str, ...]] = (
        "include_state", "action_type", "default_image_resolution", "load_all_data_for_training", "obs",
        "delete_pause_frame",  # only part of a cache key there
        "lerobot_version",  # read by the original with a default, not here: each dataset's meta/info.json says it
    )
    READ_BY_THE_ORIGINAL_ONLY: ClassVar[dict[str, object]] = {"dataset_py": "lerobot_datasets"}  # one data loader family here

    data_root_dir: str | None = key(None, "folder holding the datasets of a named mixture (unused when data_mix is a "
                                    "path)")
    data_mix: str = key("robotwin", "named mixture, or a path: a LeRobot dataset folder, a folder of them, or a "
                        "mixture file (YAML list of {path, weight, data_config})")
    data_config: str = key("auto", "data config of datasets given by path (a name in DiT4DiT/dataloader/"
                           "data_configs.py, or auto = the one that fits the dataset's features); named mixtures keep "
                           "their own")
    views: Literal["auto", "side_by_side", "as_frames"] = key(
        "auto", "how several cameras are combined: side_by_side (one wide frame per step), as_frames (each camera's "
        "frames as extra steps), auto = each data config's own layout (the original's)")
    mask_padded_actions: bool = key(False, "action_mask is false for steps past an episode's end, so the action loss "
                                    "ignores them (the original trains on the repeated last action)")
    statistics: Literal["computed", "dataset"] = key(
        "computed", "normalisation statistics: computed (exact, over every row) or dataset (the dataset's own "
        "meta/stats.json)")
    per_device_batch_size: int = key(4, "samples per process per micro-step", min=1)
    video_delta_indices: list[int] = key([0, 1, 2, 3, 4, 5, 6, 7], "frame offsets fetched per sample (before "
                                         "subsampling)", min=0)
    action_video_freq_ratio: int = key(1, "keep every n-th fetched frame", min=1)
    max_state_dim: int = key(64, "state is zero-padded to this width", min=0)
    max_action_dim: int = key(32, "action is zero-padded to this width", min=1)
    image_size: int = key(224, "each camera view is resized to image_size x image_size (the original's [h, w] with "
                          "h == w is accepted)", kind="size", min=16)
    video_backend: Literal["pyav", "torchcodec"] = key(
        "pyav", "frame decoder: pyav or torchcodec (the original's torchvision_av, decord and opencv decode with pyav)",
        aliases=VIDEO_BACKEND_ALIASES, alias_note="is the original's decoder; frames are decoded with")
    num_workers: int = key(2, "DataLoader worker processes", min=0, max=64,
                           why="each worker is a process with its own readers")
    holdout_episodes: int = key(1, "episodes per dataset kept out of training for the eval action MSE (0 = none)",
                                min=0)
    cache_dir: str | None = key(None, "where statistics and step indexes are cached (default: ~/.cache/dit4dit)")
    skip_non_finite_episodes: bool = key(False, "leave out episodes with NaN/Inf state or action values (counted) "
                                         "instead of stopping")
    image_augmentation: DatasetsVlaDataImageAugmentationSection = field(
        default_factory=DatasetsVlaDataImageAugmentationSection)

    @property
    def frame_offsets(self) -> tuple[int, ...]:
        """The frame offsets a sample carries: every action_video_freq_ratio-th of video_delta_indices (the first
        conditions, the rest are the video loss's targets)."""
        return tuple(self.video_delta_indices[:: self.action_video_freq_ratio])

    @property
    def num_frames(self) -> int:
        """Frames per sample after subsampling."""
        return len(self.frame_offsets)


@read_only
@dataclass(frozen=True)
class DatasetsSection(Section):
    """datasets"""

    vla_data: DatasetsVlaDataSection = field(default_factory=DatasetsVlaDataSection)


@read_only
@dataclass(frozen=True)
class TrainerSchedulerSpecificKwargsSection(Section):
    """trainer.scheduler_specific_kwargs"""

    min_lr: float = key(5e-7, "floor of the cosine schedule (as a rate relative to learning_rate.base)", min=0.0)


@read_only
@dataclass(frozen=True)
class TrainerOptimizerSection(Section):
    """trainer.optimizer"""

    UNREAD_BY_THE_ORIGINAL: ClassVar[tuple[str, ...]] = ("name",)

    betas: list[float] = key([0.9, 0.95], "AdamW betas", min=0.0, max=1.0, length=2)
    eps: float = key(1e-8, "AdamW epsilon", min=0.0)
    weight_decay: float = key(1e-8, "AdamW weight decay", min=0.0)


@read_only
@dataclass(frozen=True)
class TrainerLossScaleSection(Section):
    """trainer.loss_scale"""

    future_video: float = key(1.0, "weight of the future-video loss in the total", min=0.0)

    def scaled_video(self, future_video_loss: float) -> float:
        """The future-video loss as it enters the total loss (and as the original logs it, future_video_loss_scaled);
        a float or a tensor."""
        return self.future_video * future_video_loss


@read_only
@dataclass(frozen=True)
class TrainerClosedLoopEvalSection(Section):
    """trainer.closed_loop_eval"""

    interval: int = key(0, "closed-loop success rate every n optimizer steps, on the checkpoint saved then, by a side "
                        "process while training goes on (0 = off; a multiple of save_interval)", min=0)
    task: str = key("handle-press-v3", "Meta-World v3 task it evaluates")
    episodes: int = key(10, "episodes per evaluation (seeds seed..seed+episodes-1, the same at every step)", min=1,
                        max=10_000, why="each is a simulator run of up to max_steps steps; 10,000 of 150 steps take "
                        "days on a CPU")
    max_steps: int = key(150, "env steps before an episode counts as a failure", min=1)
    seed: int = key(1000, "seed of the first episode (collect's demos use 0..)", min=0)
    num_envs: int = key(1, "simulator processes of one evaluation", min=1)
    device: EvaluationDevice = key(
        "cpu", "device of the evaluation's policy server: cpu, or auto/cuda/npu for the run's kind of device (a "
        "device no training process on the node uses: the first free one, or device_id)")
    device_id: int | None = key(None, "with device auto/cuda/npu: the device (its number in npu-smi / nvidia-smi) "
                                "the evaluation's server alone sees; one no training process on this node uses",
                                min=0)
    threads: int = key(1, "OMP_NUM_THREADS of the side process (its server and simulators)", min=1, max=256,
                       why="OpenMP threads beyond a node's cores only contend with training")
    python: str | None = key(None, "Python of the simulator environment (default: this checkout's "
                             ".venv-metaworld/bin/python, `make sim-env`)")
    evaluate_options: str | None = key("", "scene options as `metaworld collect` got them, e.g. '--image_size 32'")
    at_end: Literal["wait", "cancel"] = key("wait", "the evaluation still running when training ends: wait for it, or "
                                            "cancel it")
    timeout_s: float = key(3600.0, "longest one evaluation may run: past it the side process, its server and "
                           "simulators are ended with a line, and the next due step starts a new one", min=1.0,
                           max=7 * 86_400.0)


@read_only
@dataclass(frozen=True)
class TrainerSection(Section):
    """trainer"""

    UNREAD_BY_THE_ORIGINAL: ClassVar[tuple[str, ...]] = (
        "epochs",
        "max_grad_norm",  # the original clips with trainer.gradient_clipping
        "warmup_ratio",
        "weight_decay",  # the original reads trainer.optimizer.weight_decay
        "resume_epoch", "resume_step", "enable_mixed_precision_training",
    )

    max_train_steps: int = key(100000, "optimizer steps to run", min=1, max=MAX_STEPS, why=STEPS_WHY)
    num_warmup_steps: int = key(5000, "linear learning-rate warm-up steps", min=0, max=MAX_STEPS, why=STEPS_WHY)
    save_interval: int = key(10000, "save a checkpoint every n optimizer steps", min=1)
    eval_interval: int = key(100, "held-out action MSE every n optimizer steps", min=1)
    logging_frequency: int = key(10, "log metrics every n optimizer steps", min=1)
    # The user names the modules: 'base' and one rate per named module path.
    learning_rate: dict[str, float] = open_node(
        Key(1e-4, "learning rate of the named module", min=0.0),
        base=Key(1e-4, "learning rate of parameters in no named group", min=0.0),
        backbone_interface=Key(1e-5, "learning rate of the video backbone", min=0.0),
        action_model=Key(1e-4, "learning rate of the action head", min=0.0))
    lr_scheduler_type: LrSchedulerType = key("cosine_with_min_lr", "transformers scheduler name")
    scheduler_specific_kwargs: TrainerSchedulerSpecificKwargsSection = field(
        default_factory=TrainerSchedulerSpecificKwargsSection)
    freeze_modules: str | None = key("", "comma-separated module paths that are not trained")
    repeated_diffusion_steps: int = key(4, "each sample is repeated this often in the action flow-matching loss", min=1,
                                        max=256, why="the action head's batch grows with it; the original uses 4 or 8")
    gradient_clipping: float = key(1.0, "max global gradient norm", min=0.0)
    gradient_accumulation_steps: int = key(1, "micro-steps per optimizer step", min=1, max=1024,
                                           why="an optimizer step holds all its micro-batches in memory at once")
    optimizer: TrainerOptimizerSection = field(default_factory=TrainerOptimizerSection)
    loss_scale: TrainerLossScaleSection = field(default_factory=TrainerLossScaleSection)
    is_resume: bool = key(False, "continue the run in output_dir from its latest training state")
    resume_weights_only: bool = key(False, "with is_resume and no training state: continue from the newest steps_N "
                                    "weights (step N, LR schedule fast-forwarded, fresh optimizer)")
    resume_allow_changes: str | None = key("", "comma-separated keys that may differ from the resumed run's config "
                                           "(e.g. seed)")
    move_old_run: bool = key(False, "without is_resume: move an earlier run in the run dir aside to "
                             "<run_id>.old-<time>")
    pretrained_checkpoint: str | None = key(None, "weights (.pt) to start from")
    reload_modules: str | None = key(None, "comma-separated module prefixes to load from pretrained_checkpoint "
                                     "(default: all)")
    save_full_state_dict: bool = key(False, "checkpoints include frozen modules (text encoder, VAE) too")
    keep_last_states: int = key(2, "training states kept for resume (older ones are deleted)", min=1)
    allow_unsafe_zero_overlap: bool = key(False, "keep ZeRO-1/2 overlap_comm on a DeepSpeed before 0.19.0, which can "
                                          "corrupt gradients with it (off: it is turned off with a warning)")
    mixed_precision: Literal["bf16", "no"] = key("bf16", "autocast dtype of every autocast site: bf16, or no (fp32 "
                                                 "throughout)", aliases={"false": "no", "fp32": "no"})
    collective_timeout_s: int = key(600, "seconds a collective waits for the other ranks before the run fails", min=1,
                                    max=MAX_TIMEOUT_S, why=TIMEOUT_WHY)
    one_rank_timeout_s: int = key(7200, "seconds the other ranks wait, on a CPU (gloo) group, for work one rank or "
                                  "one per node does alone: the dataset index, the prompt store's share, writing a "
                                  "checkpoint (device collectives keep collective_timeout_s)", min=1,
                                  max=MAX_TIMEOUT_S, why=TIMEOUT_WHY)
    stall_timeout_s: int = key(300, "a rank silent for this long (stopped, dead, cut off) ends the run with exit "
                               "status 76 on every other rank (0 = off; keep it below collective_timeout_s)", min=0,
                               max=MAX_TIMEOUT_S, why=TIMEOUT_WHY)
    deterministic: bool = key(False, "deterministic kernels: torch.use_deterministic_algorithms(True), and through "
                              "the launcher HCCL_DETERMINISTIC=true (NPU) or CUBLAS_WORKSPACE_CONFIG=:4096:8 (CUDA); "
                              "slower (bench/device_check.py measures it)")
    enable_gradient_checkpointing: bool = key(False, "recompute each Cosmos transformer block and action DiT block in "
                                              "the backward pass instead of keeping its activations (less memory, "
                                              "about one more forward of compute)")
    text_encoder_gradient_checkpointing: bool = key(
        False, "when the text encoder trains (not in freeze_modules): recompute its layers in the backward pass, "
        "keeping each layer's output only (transformers' gradient_checkpointing_enable)")
    gradient_checkpointing_blocks: str | None = key(
        None, "recompute only the first N Cosmos transformer blocks (a count, or auto: the fewest the memory plan "
        "needs on the device in use); null: all of them with enable_gradient_checkpointing, else none. The action "
        "head follows enable_gradient_checkpointing")
    profile_steps: str | None = key(None, "optimizer steps to profile, e.g. 10,12: their trace in <run_dir>/profile "
                                    "(torch.profiler; torch_npu.profiler on NPU) and their top operators in train.log")
    ignore_resource_check: bool = key(False, "start even when the memory estimate exceeds what this machine has "
                                      "(experts: the estimate is conservative)")
    closed_loop_eval: TrainerClosedLoopEvalSection = field(default_factory=TrainerClosedLoopEvalSection)


@read_only
@dataclass(frozen=True)
class ConfigSections(Section):
    """the whole config"""

    UNREAD_BY_THE_ORIGINAL: ClassVar[tuple[str, ...]] = ("is_debug",)

    run_id: str = key("dit4dit_run", "name of the run; the run directory is <run_root_dir>/<run_id>")
    run_root_dir: str = key("./runs", "parent folder of run directories")
    seed: int = key(3047, "base random seed (each process adds its rank); 3047 when a YAML sets none, as in the "
                    "original", min=0, max=MAX_SEED)
    trackers: list[Literal["jsonl", "wandb"]] = key(["jsonl", "wandb"], "metric sinks: any of jsonl, wandb")
    wandb_entity: str | None = key(None, "wandb entity (team or user)")
    wandb_project: str = key("dit4dit", "wandb project")
    wandb_mode: Literal["offline", "online", "disabled"] | None = key(
        None, "wandb mode: offline, online or disabled (unset: $WANDB_MODE when exported, else offline)")
    output_dir: str | None = key(None, "<run_root_dir>/<run_id>, derived when the config loads; setting it has no "
                                 "effect")
    framework: FrameworkSection = field(default_factory=FrameworkSection)
    datasets: DatasetsSection = field(default_factory=DatasetsSection)
    trainer: TrainerSection = field(default_factory=TrainerSection)

    @property
    def run_dir(self) -> Path:
        """<run_root_dir>/<run_id>: output_dir, which load_config derives and checks."""
        return Path(self.output_dir if self.output_dir is not None else Path(self.run_root_dir, self.run_id))

    def store_dir(self, kind: StoreKind) -> Path:
        """The folder of the prompt-embedding or VAE-latent store: framework.cosmos25.<kind>_store_dir, else under
        datasets.vla_data.cache_dir."""
        cosmos = self.framework.cosmos25
        configured = cosmos.prompt_store_dir if kind == "prompt" else cosmos.latent_store_dir
        return store_root(kind, configured, self.datasets.vla_data.cache_dir)

    def global_batch(self, num_processes: int) -> int:
        """Samples per optimizer step: per_device_batch_size x gradient_accumulation_steps x processes."""
        return self.datasets.vla_data.per_device_batch_size * self.trainer.gradient_accumulation_steps * num_processes
