"""The one tree of known config keys: defaults, one-line meanings, strict merging and CLI overrides.

A YAML file merges on top of the defaults, then `--a.b.c value` / `--a.b.c=value` overrides on top of that.
Any key that is not in the tree is an error naming the closest valid key: a typo never silently creates a
dead setting. Keys are the original DiT4DiT's, so its configs and launch flags carry over.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


class ConfigError(ValueError):
    """A config file, key or value the user has to fix; the message says how."""


@dataclass(frozen=True)
class Key:
    default: Any
    help: str


# Nodes whose children the user names (module paths for learning-rate groups).
OPEN_NODES = {"trainer.learning_rate"}

SCHEMA: dict = {
    "run_id": Key("dit4dit_run", "name of the run; the run directory is <run_root_dir>/<run_id>"),
    "run_root_dir": Key("./runs", "parent folder of run directories"),
    "seed": Key(42, "base random seed (each process adds its rank)"),
    "trackers": Key(["jsonl", "wandb"], "metric sinks: any of jsonl, wandb"),
    "wandb_entity": Key(None, "wandb entity (team or user)"),
    "wandb_project": Key("dit4dit", "wandb project"),
    "wandb_mode": Key("offline", "wandb mode: offline, online or disabled"),
    "output_dir": Key(None, "set at run time to <run_root_dir>/<run_id>; do not set it yourself"),
    "framework": {
        "name": Key("DiT4DiT", "registered framework class to build"),
        "cosmos25": {
            "base_model": Key(None, "local folder of a diffusers Cosmos2_5_PredictBasePipeline snapshot"),
            "revision": Key("diffusers/base/post-trained", "hub revision the snapshot was downloaded from"),
            "local_files_only": Key(True, "never contact the hub; only local folders are read"),
            "torch_dtype": Key("bfloat16", "dtype of every pipeline module: bfloat16, float16 or float32"),
            "attn_implementation": Key("sdpa", "text-encoder attention: sdpa, eager or flash_attention_2"),
            "extract_layer": Key(17, "index of the transformer block whose output feeds the action head"),
            "max_sequence_length": Key(512, "prompt length in tokens (padded and truncated)"),
            "vl_hidden_dim": Key(2048, "width of the backbone features (the transformer's hidden size)"),
            "conditional_frame_timestep": Key(0.0001, "timestep given to the conditioning latent frame"),
            "future_loss_type": Key("flow_matching", "future-video loss: flow_matching (aliases latent_flow_matching, rectified_flow, rf)"),
            "training": Key("joint", "joint (action + video losses), action (no video loss) or video (no action head)"),
            "prompt_cache": Key(True, "run the text encoder once per unique instruction and reuse the embedding"),
            "flow_matching": {
                "time_distribution": Key("logit_normal", "video flow-matching time: logit_normal or uniform"),
                "high_sigma_ratio": Key(0.05, "probability of drawing t from [high_sigma_min, 1]; null disables"),
                "high_sigma_min": Key(0.98, "lower end of the high-sigma range"),
            },
        },
        "action_model": {
            "action_model_type": Key("DiT-B", "action DiT size: DiT-B (12x64) or DiT-L (32x48)"),
            "hidden_size": Key(2560, "width of the state encoder and action decoder MLPs"),
            "action_dim": Key(14, "action width seen by the model (equals datasets.vla_data.max_action_dim)"),
            "state_dim": Key(14, "state width seen by the model (equals datasets.vla_data.max_state_dim); 0 = no state"),
            "future_action_window_size": Key(7, "action chunk = future_action_window_size + 1 steps"),
            "past_action_window_size": Key(0, "past action steps (only 0 is supported)"),
            "action_horizon": Key(8, "steps predicted at inference"),
            "add_pos_embed": Key(True, "add a learned position embedding to the action tokens"),
            "max_seq_len": Key(1024, "size of the action position-embedding table"),
            "noise_beta_alpha": Key(1.5, "alpha of the Beta flow-matching time distribution"),
            "noise_beta_beta": Key(1.0, "beta of the Beta flow-matching time distribution"),
            "noise_s": Key(0.999, "flow-matching time is Beta(alpha, beta) / noise_s"),
            "num_timestep_buckets": Key(1000, "flow-matching time is quantised into this many buckets"),
            "num_inference_timesteps": Key(4, "Euler steps at inference"),
            "diffusion_model_cfg": {
                "cross_attention_dim": Key(2048, "width of the backbone features the DiT attends to"),
                "dropout": Key(0.2, "dropout in attention outputs and feed-forward"),
                "final_dropout": Key(True, "extra dropout after each attention"),
                "interleave_self_attention": Key(True, "odd blocks self-attend, even blocks cross-attend"),
                "norm_type": Key("ada_norm", "block normalisation (ada_norm)"),
                "num_layers": Key(16, "number of DiT blocks"),
                "output_dim": Key(2560, "DiT output width"),
                "positional_embeddings": Key(None, "per-block positional embedding (null = none)"),
                "num_attention_heads": Key(None, "override the size table's head count (tiny models)"),
                "attention_head_dim": Key(None, "override the size table's head width (tiny models)"),
            },
        },
    },
    "datasets": {
        "vla_data": {
            "dataset_py": Key("lerobot_datasets", "data loader family (only lerobot_datasets)"),
            "data_root_dir": Key(None, "folder holding the datasets named by the mixture"),
            "data_mix": Key("robotwin", "named mixture of datasets"),
            "per_device_batch_size": Key(4, "samples per process per micro-step"),
            "video_delta_indices": Key([0, 1, 2, 3, 4, 5, 6, 7], "frame offsets fetched per sample (before subsampling)"),
            "action_video_freq_ratio": Key(1, "keep every n-th fetched frame"),
            "max_state_dim": Key(14, "state is zero-padded to this width"),
            "max_action_dim": Key(14, "action is zero-padded to this width"),
            "image_size": Key(224, "each camera view is resized to image_size x image_size"),
            "video_backend": Key("pyav", "frame decoder: pyav or torchcodec"),
            "lerobot_version": Key("v2.0", "dataset layout: v2.0 or v2.1"),
            "num_workers": Key(2, "DataLoader worker processes"),
            "holdout_episodes": Key(1, "episodes per dataset kept out of training for the eval action MSE (0 = none)"),
            "cache_dir": Key(None, "where statistics and step indexes are cached (default: ~/.cache/dit4dit)"),
            "skip_non_finite_episodes": Key(False, "leave out episodes with NaN/Inf state or action values (counted) instead of stopping"),
        },
    },
    "trainer": {
        "max_train_steps": Key(100000, "optimizer steps to run"),
        "num_warmup_steps": Key(5000, "linear learning-rate warm-up steps"),
        "save_interval": Key(10000, "save a checkpoint every n optimizer steps"),
        "eval_interval": Key(100, "held-out action MSE every n optimizer steps"),
        "logging_frequency": Key(10, "log metrics every n optimizer steps"),
        "learning_rate": {
            "base": Key(1e-4, "learning rate of parameters in no named group"),
            "backbone_interface": Key(1e-5, "learning rate of the video backbone"),
            "action_model": Key(1e-4, "learning rate of the action head"),
        },
        "lr_scheduler_type": Key("cosine_with_min_lr", "transformers scheduler name"),
        "scheduler_specific_kwargs": {
            "min_lr": Key(5e-7, "floor of the cosine schedule (as a rate relative to learning_rate.base)"),
        },
        "freeze_modules": Key("", "comma-separated module paths that are not trained"),
        "repeated_diffusion_steps": Key(4, "each sample is repeated this often in the action flow-matching loss"),
        "gradient_clipping": Key(1.0, "max global gradient norm"),
        "gradient_accumulation_steps": Key(1, "micro-steps per optimizer step"),
        "optimizer": {
            "betas": Key([0.9, 0.95], "AdamW betas"),
            "eps": Key(1e-8, "AdamW epsilon"),
            "weight_decay": Key(1e-8, "AdamW weight decay"),
        },
        "loss_scale": {
            "future_video": Key(1.0, "weight of the future-video loss in the total"),
        },
        "is_resume": Key(False, "continue the run in output_dir from its latest training state"),
        "resume_weights_only": Key(False, "with is_resume and no training state: continue from the newest steps_N weights, fresh optimizer"),
        "resume_allow_changes": Key("", "comma-separated keys that may differ from the resumed run's config (e.g. seed)"),
        "move_old_run": Key(False, "without is_resume: move an earlier run in the run dir aside to <run_id>.old-<time>"),
        "pretrained_checkpoint": Key(None, "weights (.pt) to start from"),
        "reload_modules": Key(None, "comma-separated module prefixes to load from pretrained_checkpoint (default: all)"),
        "save_full_state_dict": Key(False, "checkpoints include frozen modules (text encoder, VAE) too"),
        "keep_last_states": Key(2, "training states kept for resume (older ones are deleted)"),
        "mixed_precision": Key("bf16", "autocast dtype of the train step: bf16 or no"),
    },
}


def _walk(node: dict, prefix: str = ""):
    for name, value in node.items():
        path = f"{prefix}{name}"
        if isinstance(value, Key):
            yield path, value
        else:
            yield from _walk(value, path + ".")


KNOWN_KEYS: dict[str, Key] = dict(_walk(SCHEMA))


def describe(path: str) -> str:
    """The one-line meaning of a known key."""
    return KNOWN_KEYS[path].help


def default_config() -> DictConfig:
    def build(node: dict) -> dict:
        return {k: (v.default if isinstance(v, Key) else build(v)) for k, v in node.items()}

    return OmegaConf.create(build(SCHEMA))


def _first_leaf(path: str, value: Any) -> str:
    while isinstance(value, dict) and value:
        name, value = next(iter(value.items()))
        path = f"{path}.{name}"
    return path


def _closest(path: str) -> str:
    candidates = list(KNOWN_KEYS) + [p + ".<module name>" for p in OPEN_NODES]
    return difflib.get_close_matches(path, candidates, n=1, cutoff=0.0)[0]


def check_known_keys(cfg: DictConfig | dict, source: str) -> None:
    """Raise ConfigError for the first key in `cfg` that the schema does not know."""
    container = OmegaConf.to_container(cfg) if isinstance(cfg, (DictConfig, ListConfig)) else cfg

    def visit(node: Any, prefix: str) -> None:
        if not isinstance(node, dict):
            return
        for name, value in node.items():
            path = f"{prefix}{name}"
            if prefix.rstrip(".") in OPEN_NODES:
                continue
            if path in KNOWN_KEYS:
                if isinstance(value, dict) and KNOWN_KEYS[path].default is not None:
                    raise ConfigError(f"{source}: '{path}' takes a single value, not a mapping")
                continue
            if any(k.startswith(path + ".") for k in KNOWN_KEYS) or path in OPEN_NODES:
                if not isinstance(value, dict):
                    raise ConfigError(f"{source}: '{path}' is a section; set its keys, e.g. '{path}.<key>'")
                visit(value, path + ".")
                continue
            leaf = _first_leaf(path, value)
            raise ConfigError(
                f"{source}: unknown config key '{leaf}'. Did you mean '{_closest(leaf)}'? "
                f"(valid keys are listed in DiT4DiT/config/schema.py)"
            )

    visit(container, "")


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


def _coerce(path: str, value: Any) -> Any:
    """A value of the type the key's default has (YAML/CLI give '1e-4' or 'inf' as text), or a ConfigError."""
    default = KNOWN_KEYS[path].default
    if isinstance(default, str) and isinstance(value, bool):
        # A valueless --key on the command line reads as true: a text key needs its value.
        raise ConfigError(f"{path}: expected text, got {str(value).lower()}; give it a value, e.g. --{path}=NAME")
    if isinstance(default, str) and isinstance(value, (int, float)):
        return str(value)  # run_id: 20250101 names a run, it is not a number
    if value is None or default is None or isinstance(default, (str, list)):
        return value
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: expected a number, got {value!r}") from None
    if kind is int:
        if not number.is_integer():
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return int(number)
    return number


def _coerce_types(cfg: DictConfig) -> None:
    for path in KNOWN_KEYS:
        value = OmegaConf.select(cfg, path)
        coerced = _coerce(path, value)
        if coerced is not value:
            OmegaConf.update(cfg, path, coerced)


def load_config(config_yaml: str | Path | None, overrides: list[str] | None = None) -> DictConfig:
    """Defaults, then the YAML file, then CLI dotlist overrides; every key checked against the schema."""
    cfg = default_config()
    if config_yaml is not None:
        path = Path(config_yaml)
        if not path.is_file():
            raise ConfigError(f"--config_yaml {path}: no such file; pass a YAML such as DiT4DiT/config/tiny/dit4dit_tiny.yaml")
        file_cfg = OmegaConf.load(path)
        check_known_keys(file_cfg, str(path))
        cfg = OmegaConf.merge(cfg, file_cfg)
    if overrides:
        cli_cfg = OmegaConf.from_dotlist(overrides)
        check_known_keys(cli_cfg, "command line")
        cfg = OmegaConf.merge(cfg, cli_cfg)
    _coerce_types(cfg)
    return cfg
