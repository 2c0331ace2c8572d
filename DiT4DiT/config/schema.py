"""The one tree of known config keys, and loading: defaults, then a YAML file, then command-line overrides.

Each key declares its default, one-line meaning, type, choices and bounds (DiT4DiT/config/keys.py). Loading
checks every key and every cross-key rule (DiT4DiT/config/validate.py) before any process group, dataset or
model exists, so the rest of the code reads typed values and never re-checks them. A key that is not in the tree
is an error naming the closest valid key, except the keys the original's own YAMLs carry without reading them
(accepted with one warning). Keys are the original DiT4DiT's, so its configs and launch flags carry over.
"""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.keys import Key, coerce
from DiT4DiT.facts import is_under
from DiT4DiT.yaml_files import checked_yaml_text

__all__ = ["ConfigError", "Key", "KNOWN_KEYS", "SCHEMA", "default_config", "load_config", "normalize_cli_overrides"]

TRACKERS = ("jsonl", "wandb")
TRAINING_MODES = ("joint", "action", "video")
FUTURE_LOSS_TYPES = ("flow_matching", "latent_flow_matching", "rectified_flow", "rf", "pixel_l1", "pixel_mse", "latent_mse")
TIME_DISTRIBUTIONS = ("logit_normal", "uniform")
VIDEO_BACKENDS = ("pyav", "torchcodec")
# transformers' get_scheduler names that need nothing beyond warm-up and total steps (and the cosine floor);
# reduce_lr_on_plateau (a metric per step) and warmup_stable_decay (decay steps) do not fit the loop.
LR_SCHEDULERS = ("cosine_with_min_lr", "cosine_warmup_with_min_lr", "linear", "cosine", "cosine_with_restarts",
                 "polynomial", "constant", "constant_with_warmup", "inverse_sqrt")
MIN_LR_SCHEDULERS = ("cosine_with_min_lr", "cosine_warmup_with_min_lr")  # read scheduler_specific_kwargs.min_lr
MAX_SEED = 2**32 - 1  # numpy's seed range (set_seed seeds numpy with seed + rank)
# Upper bounds: values past them are typos that would otherwise exhaust memory or overflow a timer.
MAX_STEPS, STEPS_WHY = 100_000_000, "1e8 steps at 1 s each is three years; a larger count is a typo"
MAX_SEQUENCE_LENGTH = 4096  # prompt tokens: each prompt's text-encoder output grows with it; the original uses 512
MAX_TIMEOUT_S, TIMEOUT_WHY = 86_400, "a day: a hung rank holds every device this long, and torch's timer overflows past it"
# The original's decoders: decord has no aarch64 wheels and torchvision's reader is deprecated; PyAV reads the
# same frames (torchvision_av is PyAV underneath).
VIDEO_BACKEND_ALIASES = {"torchvision_av": "pyav", "decord": "pyav", "opencv": "pyav"}


class OriginalKeysWarning(UserWarning):
    """The config carries keys the original defines but never reads, or puts a key where the original ignores it."""


# Nodes whose children the user names (module paths for learning-rate groups).
OPEN_NODES = {"trainer.learning_rate": Key(1e-4, "learning rate of the named module", min=0.0)}

SCHEMA: dict = {
    "run_id": Key("dit4dit_run", "name of the run; the run directory is <run_root_dir>/<run_id>"),
    "run_root_dir": Key("./runs", "parent folder of run directories"),
    "seed": Key(3047, "base random seed (each process adds its rank); 3047 when a YAML sets none, as in the original",
                min=0, max=MAX_SEED),
    "trackers": Key(["jsonl", "wandb"], "metric sinks: any of jsonl, wandb", choices=TRACKERS),
    "wandb_entity": Key(None, "wandb entity (team or user)", kind="str"),
    "wandb_project": Key("dit4dit", "wandb project"),
    "wandb_mode": Key(None, "wandb mode: offline, online or disabled (unset: $WANDB_MODE when exported, else offline)",
                      kind="str", choices=("offline", "online", "disabled")),
    "output_dir": Key(None, "<run_root_dir>/<run_id>, derived when the config loads; setting it has no effect", kind="str"),
    "framework": {
        "name": Key("DiT4DiT", "registered framework class to build"),
        "cosmos25": {
            "base_model": Key(None, "local folder of a diffusers Cosmos2_5_PredictBasePipeline snapshot", kind="str"),
            "local_files_only": Key(True, "never contact the hub; only local folders are read"),
            "torch_dtype": Key("bfloat16", "dtype of every pipeline module", choices=("bfloat16", "float16", "float32")),
            "attn_implementation": Key("sdpa", "text-encoder attention; flash_attention_2 falls back to sdpa where "
                                       "flash-attn (CUDA) or torch_npu (Ascend) is absent",
                                       choices=("sdpa", "eager", "flash_attention_2")),
            "extract_layer": Key(19, "index of the transformer block whose output feeds the action head", min=0),
            "max_sequence_length": Key(512, "prompt length in tokens (padded and truncated)", min=1, max=MAX_SEQUENCE_LENGTH,
                                       why="each prompt's text-encoder output grows with it; the original uses 512"),
            "vl_hidden_dim": Key(2048, "width of the backbone features (the transformer's hidden size)", min=1),
            "conditional_frame_timestep": Key(0.001, "timestep given to the conditioning latent frame", min=0.0),
            "future_loss_type": Key("pixel_l1", "future-video loss", choices=FUTURE_LOSS_TYPES),
            "future_num_inference_steps": Key(2, "denoising steps of the pixel / latent future losses", min=1),
            "training": Key("joint", "joint (action + video losses), action (no video loss) or video (no action head)",
                            choices=TRAINING_MODES),
            "prompt_cache": Key(True, "run the text encoder once per unique instruction and reuse the embedding"),
            "prompt_store_dir": Key(None, "prompt-embedding store (default: <datasets.vla_data.cache_dir>/prompt_embeddings); local disk per node or a shared filesystem", kind="str"),
            "flow_matching": {
                "time_distribution": Key("logit_normal", "video flow-matching time", choices=TIME_DISTRIBUTIONS),
                "high_sigma_ratio": Key(0.05, "probability of drawing t from [high_sigma_min, 1]; null disables",
                                        min=0.0, max=1.0, nullable=True),
                "high_sigma_min": Key(0.98, "lower end of the high-sigma range (null when high_sigma_ratio is null)",
                                      min=0.0, max=1.0, nullable=True),
            },
        },
        "action_model": {
            "action_model_type": Key("DiT-B", "action DiT size: DiT-B (12x64) or DiT-L (32x48)", choices=("DiT-B", "DiT-L")),
            "hidden_size": Key(2560, "width of the state encoder and action decoder MLPs", min=1),
            "action_dim": Key(32, "action width seen by the model (equals datasets.vla_data.max_action_dim)", min=1),
            "state_dim": Key(64, "state width seen by the model (equals datasets.vla_data.max_state_dim); 0 = no state",
                             min=0),
            "future_action_window_size": Key(7, "action chunk = future_action_window_size + 1 steps", min=0),
            "action_horizon": Key(8, "steps predicted at inference (future_action_window_size + 1)", min=1),
            "add_pos_embed": Key(True, "add a learned position embedding to the action tokens"),
            "max_seq_len": Key(1024, "size of the action position-embedding table", min=1),
            "noise_beta_alpha": Key(1.5, "alpha of the Beta flow-matching time distribution", min=0.0),
            "noise_beta_beta": Key(1.0, "beta of the Beta flow-matching time distribution", min=0.0),
            "noise_s": Key(0.999, "flow-matching time is Beta(alpha, beta) / noise_s", min=0.0, max=1.0),
            "num_timestep_buckets": Key(1000, "flow-matching time is quantised into this many buckets", min=1),
            "num_inference_timesteps": Key(4, "Euler steps at inference", min=1),
            "diffusion_model_cfg": {
                "cross_attention_dim": Key(2048, "width of the backbone features the DiT attends to", min=1),
                "dropout": Key(0.2, "dropout in attention outputs and feed-forward", min=0.0, max=1.0),
                "final_dropout": Key(True, "extra dropout after each attention"),
                "interleave_self_attention": Key(True, "odd blocks self-attend, even blocks cross-attend"),
                "num_layers": Key(16, "number of DiT blocks", min=1),
                "output_dim": Key(2560, "DiT output width", min=1),
                "positional_embeddings": Key(None, "per-block positional embedding (null = none)", kind="str"),
                "num_attention_heads": Key(None, "override the size table's head count (tiny models)", kind="int", min=1),
                "attention_head_dim": Key(None, "override the size table's head width (tiny models)", kind="int", min=1),
            },
        },
    },
    "datasets": {
        "vla_data": {
            "data_root_dir": Key(None, "folder holding the datasets of a named mixture (unused when data_mix is a path)",
                                 kind="str"),
            "data_mix": Key("robotwin", "named mixture, or a path: a LeRobot dataset folder, a folder of them, or a "
                            "mixture file (YAML list of {path, weight, data_config})"),
            "data_config": Key("auto", "data config of datasets given by path (a name in DiT4DiT/dataloader/"
                               "data_configs.py, or auto = the one that fits the dataset's features); named mixtures "
                               "keep their own"),
            "views": Key("auto", "how several cameras are combined: side_by_side (one wide frame per step), as_frames "
                         "(each camera's frames as extra steps), auto = each data config's own layout (the original's)",
                         choices=("auto", "side_by_side", "as_frames")),
            "mask_padded_actions": Key(False, "action_mask is false for steps past an episode's end, so the action loss "
                                       "ignores them (the original trains on the repeated last action)"),
            "statistics": Key("computed", "normalisation statistics: computed (exact, over every row) or dataset (the "
                              "dataset's own meta/stats.json)", choices=("computed", "dataset")),
            "per_device_batch_size": Key(4, "samples per process per micro-step", min=1),
            "video_delta_indices": Key([0, 1, 2, 3, 4, 5, 6, 7], "frame offsets fetched per sample (before subsampling)",
                                       min=0),
            "action_video_freq_ratio": Key(1, "keep every n-th fetched frame", min=1),
            "max_state_dim": Key(64, "state is zero-padded to this width", min=0),
            "max_action_dim": Key(32, "action is zero-padded to this width", min=1),
            "image_size": Key(224, "each camera view is resized to image_size x image_size (the original's [h, w] "
                              "with h == w is accepted)", kind="size", min=16),
            "video_backend": Key("pyav", "frame decoder: pyav or torchcodec (the original's torchvision_av, decord "
                                 "and opencv decode with pyav)", choices=VIDEO_BACKENDS, aliases=VIDEO_BACKEND_ALIASES,
                                 alias_note="is the original's decoder; frames are decoded with"),
            "num_workers": Key(2, "DataLoader worker processes", min=0, max=64, why="each worker is a process with its own readers"),
            "holdout_episodes": Key(1, "episodes per dataset kept out of training for the eval action MSE (0 = none)",
                                    min=0),
            "cache_dir": Key(None, "where statistics and step indexes are cached (default: ~/.cache/dit4dit)", kind="str"),
            "skip_non_finite_episodes": Key(False, "leave out episodes with NaN/Inf state or action values (counted) "
                                            "instead of stopping"),
        },
    },
    "trainer": {
        "max_train_steps": Key(100000, "optimizer steps to run", min=1, max=MAX_STEPS, why=STEPS_WHY),
        "num_warmup_steps": Key(5000, "linear learning-rate warm-up steps", min=0, max=MAX_STEPS, why=STEPS_WHY),
        "save_interval": Key(10000, "save a checkpoint every n optimizer steps", min=1),
        "eval_interval": Key(100, "held-out action MSE every n optimizer steps", min=1),
        "logging_frequency": Key(10, "log metrics every n optimizer steps", min=1),
        "learning_rate": {
            "base": Key(1e-4, "learning rate of parameters in no named group", min=0.0),
            "backbone_interface": Key(1e-5, "learning rate of the video backbone", min=0.0),
            "action_model": Key(1e-4, "learning rate of the action head", min=0.0),
        },
        "lr_scheduler_type": Key("cosine_with_min_lr", "transformers scheduler name", choices=LR_SCHEDULERS),
        "scheduler_specific_kwargs": {
            "min_lr": Key(5e-7, "floor of the cosine schedule (as a rate relative to learning_rate.base)", min=0.0),
        },
        "freeze_modules": Key("", "comma-separated module paths that are not trained", nullable=True),
        "repeated_diffusion_steps": Key(4, "each sample is repeated this often in the action flow-matching loss", min=1,
                                            max=256, why="the action head's batch grows with it; the original uses 4 or 8"),
        "gradient_clipping": Key(1.0, "max global gradient norm", min=0.0),
        "gradient_accumulation_steps": Key(1, "micro-steps per optimizer step", min=1, max=1024,
                                               why="an optimizer step holds all its micro-batches in memory at once"),
        "optimizer": {
            "betas": Key([0.9, 0.95], "AdamW betas", min=0.0, max=1.0, length=2),
            "eps": Key(1e-8, "AdamW epsilon", min=0.0),
            "weight_decay": Key(1e-8, "AdamW weight decay", min=0.0),
        },
        "loss_scale": {
            "future_video": Key(1.0, "weight of the future-video loss in the total", min=0.0),
        },
        "is_resume": Key(False, "continue the run in output_dir from its latest training state"),
        "resume_weights_only": Key(False, "with is_resume and no training state: continue from the newest steps_N "
                                   "weights (step N, LR schedule fast-forwarded, fresh optimizer)"),
        "resume_allow_changes": Key("", "comma-separated keys that may differ from the resumed run's config (e.g. seed)",
                                    nullable=True),
        "move_old_run": Key(False, "without is_resume: move an earlier run in the run dir aside to <run_id>.old-<time>"),
        "pretrained_checkpoint": Key(None, "weights (.pt) to start from", kind="str"),
        "reload_modules": Key(None, "comma-separated module prefixes to load from pretrained_checkpoint (default: all)",
                              kind="str"),
        "save_full_state_dict": Key(False, "checkpoints include frozen modules (text encoder, VAE) too"),
        "keep_last_states": Key(2, "training states kept for resume (older ones are deleted)", min=1),
        "allow_unsafe_zero_overlap": Key(False, "keep ZeRO-1/2 overlap_comm on a DeepSpeed before 0.19.0, which can "
                                         "corrupt gradients with it (off: it is turned off with a warning)"),
        "mixed_precision": Key("bf16", "autocast dtype of every autocast site: bf16, or no (fp32 throughout)",
                               choices=("bf16", "no"), aliases={"false": "no", "fp32": "no"}),
        "collective_timeout_s": Key(600, "seconds a collective waits for the other ranks before the run fails", min=1,
                                    max=MAX_TIMEOUT_S, why=TIMEOUT_WHY),
        "stall_timeout_s": Key(300, "a rank silent for this long (stopped, dead, cut off) ends the run with exit status "
                               "76 on every other rank (0 = off; keep it below collective_timeout_s)", min=0,
                               max=MAX_TIMEOUT_S, why=TIMEOUT_WHY),
        "deterministic": Key(False, "deterministic kernels: torch.use_deterministic_algorithms(True), and through "
                             "the launcher HCCL_DETERMINISTIC=true (NPU) or CUBLAS_WORKSPACE_CONFIG=:4096:8 (CUDA); "
                             "slower (bench/device_check.py measures it)"),
        "enable_gradient_checkpointing": Key(False, "recompute each Cosmos transformer block and action DiT block in "
                                             "the backward pass instead of keeping its activations (less memory, "
                                             "about one more forward of compute)"),
        "ignore_resource_check": Key(False, "start even when the memory estimate exceeds what this machine has "
                                     "(experts: the estimate is conservative)"),
        "closed_loop_eval": {
            "interval": Key(0, "closed-loop success rate every n optimizer steps, on the checkpoint saved then, by a "
                            "side process while training goes on (0 = off; a multiple of save_interval)", min=0),
            "task": Key("handle-press-v3", "Meta-World v3 task it evaluates"),
            "episodes": Key(10, "episodes per evaluation (seeds seed..seed+episodes-1, the same at every step)",
                            min=1),
            "max_steps": Key(150, "env steps before an episode counts as a failure", min=1),
            "seed": Key(1000, "seed of the first episode (collect's demos use 0..)", min=0),
            "num_envs": Key(1, "simulator processes of one evaluation", min=1),
            "device": Key("cpu", "device of the evaluation's policy server: cpu, or auto/cuda/npu for the run's kind "
                          "of device", choices=("cpu", "auto", "cuda", "npu")),
            "threads": Key(1, "OMP_NUM_THREADS of the side process (its server and simulators)", min=1),
            "python": Key(None, "Python of the simulator environment (default: this checkout's "
                          ".venv-metaworld/bin/python, `make sim-env`)", kind="str"),
            "evaluate_options": Key("", "scene options as `metaworld collect` got them, e.g. '--image_size 32'",
                                    nullable=True),
            "at_end": Key("wait", "the evaluation still running when training ends: wait for it, or cancel it",
                          choices=("wait", "cancel")),
        },
    },
}

# Keys the original's YAMLs define but its code never reads: accepted, listed in one warning, then dropped.
UNUSED_BY_THE_ORIGINAL = (
    "is_debug",
    "framework.action_model.repeated_diffusion_steps",  # the original reads trainer.repeated_diffusion_steps
    "framework.action_model.num_target_vision_tokens",
    "datasets.vla_data.include_state",
    "datasets.vla_data.action_type",
    "datasets.vla_data.default_image_resolution",
    "datasets.vla_data.load_all_data_for_training",
    "datasets.vla_data.obs",
    "datasets.vla_data.delete_pause_frame",  # only part of a cache key there
    "trainer.epochs",
    "trainer.max_grad_norm",  # the original clips with trainer.gradient_clipping
    "trainer.warmup_ratio",
    "trainer.weight_decay",  # the original reads trainer.optimizer.weight_decay
    "trainer.optimizer.name",
    "trainer.resume_epoch",
    "trainer.resume_step",
    "trainer.enable_mixed_precision_training",
    # Read by the original with a default, not here: each dataset's meta/info.json gives its layout.
    "datasets.vla_data.lerobot_version",
)
# Keys the original's code reads and ours does not (the snapshot is a local folder, the action head has no past
# actions and only ada_norm blocks, there is one data loader family): accepted, dropped at load, and written into
# a run's config.yaml with the value in use here, which is the original's default, so the original's
# from_pretrained and training read every key they ask for (it fails on a missing one).
RECORDED_FOR_THE_ORIGINAL = {
    "framework.cosmos25.revision": "diffusers/base/post-trained",
    "framework.action_model.past_action_window_size": 0,
    "framework.action_model.diffusion_model_cfg.norm_type": "ada_norm",
    "datasets.vla_data.dataset_py": "lerobot_datasets",
}
# The original's launch scripts pass framework keys under this prefix; the original then ignores them.
MISPLACED_PREFIX = "trainer."


def _walk(node: dict, prefix: str = ""):
    for name, value in node.items():
        path = f"{prefix}{name}"
        if isinstance(value, Key):
            yield path, value
        else:
            yield from _walk(value, path + ".")


KNOWN_KEYS: dict[str, Key] = dict(_walk(SCHEMA))


def default_config() -> DictConfig:
    def build(node: dict) -> dict:
        return {k: (v.default if isinstance(v, Key) else build(v)) for k, v in node.items()}

    return OmegaConf.create(build(SCHEMA))


def leaves(node: Any, prefix: str = ""):
    """(dotted path, value) of every leaf of a plain nested dict (an empty dict is a leaf); resume compares
    configs with it too."""
    for name, value in node.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            yield from leaves(value, path + ".")
        else:
            yield path, value


def _is_section(path: str) -> bool:
    return path in OPEN_NODES or any(is_under(k, (path,)) for k in KNOWN_KEYS)


def _closest(path: str) -> str:
    candidates = list(KNOWN_KEYS) + [p + ".<module name>" for p in OPEN_NODES]
    return difflib.get_close_matches(path, candidates, n=1, cutoff=0.0)[0]


def _drop(container: dict, path: str) -> None:
    *parents, name = path.split(".")
    node = container
    for part in parents:
        node = node[part]
    del node[name]
    if parents and not node:
        _drop(container, ".".join(parents))


def accept_known_keys(cfg: DictConfig | dict, source: str) -> dict:
    """`cfg` as a plain dict without the original's unread and misplaced keys (each warned about once);
    ConfigError for any other key the schema does not know."""
    container = OmegaConf.to_container(cfg) if isinstance(cfg, (DictConfig, ListConfig)) else cfg
    unused, misplaced = [], []
    for path, value in list(leaves(container)):
        if path in KNOWN_KEYS:
            if isinstance(value, dict) and value:
                raise ConfigError(f"{source}: '{path}' takes a single value, not a mapping")
        elif path not in OPEN_NODES and is_under(path, OPEN_NODES):  # a module's entry, not the node itself
            continue
        elif is_under(path, UNUSED_BY_THE_ORIGINAL):
            unused.append(path)
            _drop(container, path)
        elif path in RECORDED_FOR_THE_ORIGINAL:
            _drop(container, path)
        elif path.startswith(MISPLACED_PREFIX) and path[len(MISPLACED_PREFIX):] in KNOWN_KEYS:
            misplaced.append(path)
            _drop(container, path)
        elif is_under(path, KNOWN_KEYS):  # below a known leaf (the leaf itself was accepted above)
            raise ConfigError(f"{source}: '{path.rsplit('.', 1)[0]}' takes a single value, not a mapping")
        elif _is_section(path):
            raise ConfigError(f"{source}: '{path}' is a section; set its keys, e.g. '{path}.<key>'")
        else:
            raise ConfigError(f"{source}: unknown config key '{path}'. Did you mean '{_closest(path)}'? "
                              f"(valid keys are listed in DiT4DiT/config/schema.py)")
    if unused:
        warnings.warn(f"{source}: not used, as in the original: {', '.join(unused)}", OriginalKeysWarning, stacklevel=3)
    for path in misplaced:
        warnings.warn(f"{source}: '{path}' is not a key (the original ignores it, and so does this run); "
                      f"the key is '{path[len(MISPLACED_PREFIX):]}'", OriginalKeysWarning, stacklevel=3)
    return container


def normalize_cli_overrides(tokens: list[str]) -> list[str]:
    """`--a.b c`, `--a.b=c` and a bare `--flag` (= true) become OmegaConf dotlist items."""
    items: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise ConfigError(f"command line: unexpected argument '{token}'; overrides look like --a.b.c value")
        key = token.lstrip("-")
        if "=" in key:
            items.append(key)
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            items.append(f"{key}={tokens[i + 1]}")
            i += 2
        else:
            items.append(f"{key}=true")
            i += 1
    return items


def _typed(cfg: DictConfig) -> None:
    """Every value takes its key's type (or a ConfigError names the key); aliases are noted once each."""
    for path, key in KNOWN_KEYS.items():
        value = _resolved(cfg, path)
        typed, note = coerce(path, key, OmegaConf.to_object(value) if isinstance(value, ListConfig) else value)
        if note:
            warnings.warn(note, OriginalKeysWarning, stacklevel=3)
        OmegaConf.update(cfg, path, typed)
    for node, key in OPEN_NODES.items():
        for name, value in OmegaConf.select(cfg, node).items():
            OmegaConf.update(cfg, f"{node}.{name}", coerce(f"{node}.{name}", key, value)[0])


def _resolved(cfg: DictConfig, path: str) -> Any:
    """The value at `path` with its ${...} references resolved; a reference that does not resolve is a ConfigError."""
    try:
        return OmegaConf.select(cfg, path)
    except OmegaConfBaseException as error:
        reason = str(error).splitlines()[0]
        raise ConfigError(f"{path}: {reason}; a ${{...}} reference must name a config key that exists "
                          f"(e.g. ${{run_id}}) or be removed") from None


def _parsed(source: str, parse) -> DictConfig:
    """YAML text parsed by `parse`; text YAML cannot read is a ConfigError naming where and what."""
    try:
        return parse()
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None and source != "command line" else ""
        reason = " ".join(str(getattr(error, "problem", None) or error).split())
        raise ConfigError(f"{source}{line}: not valid YAML ({reason}); fix the text there") from None


def read_config_file(path: str | Path) -> DictConfig:
    """A config YAML file as it stands (no defaults), read with bounds (size, text, expanded nodes)."""
    text = _parsed(str(path), lambda: checked_yaml_text(path, ConfigError, "config file", top=yaml.MappingNode))
    return _parsed(str(path), lambda: OmegaConf.create(text))


def load_config(config_yaml: str | Path | None, overrides: list[str] | None = None) -> DictConfig:
    """Defaults, then the YAML file, then CLI dotlist overrides; every key typed and every rule checked."""
    from DiT4DiT.config.validate import check_rules, run_dir_of  # validate reads the key tree defined here

    cfg = default_config()
    if config_yaml is not None:
        path = Path(config_yaml)
        if not path.is_file():
            raise ConfigError(f"--config_yaml {path}: no such file; pass a YAML such as DiT4DiT/config/tiny/dit4dit_tiny.yaml")
        cfg = OmegaConf.merge(cfg, accept_known_keys(read_config_file(path), str(path)))
    if overrides:
        given = _parsed("command line", lambda: OmegaConf.from_dotlist(overrides))
        cfg = OmegaConf.merge(cfg, accept_known_keys(given, "command line"))
    _typed(cfg)
    cfg.output_dir = str(run_dir_of(cfg.run_root_dir, cfg.run_id))
    check_rules(cfg)
    OmegaConf.set_readonly(cfg, True)  # checked once, so nothing may change it afterwards
    return cfg
