"""One process timing training steps on a fixed batch: ours, or the original DiT4DiT's from a user's checkout.

    python bench/step_timing.py prepare --config_yaml Y --out DIR [--key=value ...]
    python bench/step_timing.py ours --work DIR --result R.json [--steps 2] [--seed 0] [--latents]
    python bench/step_timing.py original --checkout PATH --work DIR --result R.json [--steps 2] [--seed 0]

`prepare` (ours) writes DIR/config.yaml (the config as a run folder records it, which the original reads),
DIR/batch.pkl (the configured batch of example dicts, the data loader's own), DIR/batch_latents.pkl (the same
examples as the latent store serves them: each clip's VAE posterior in place of its frames, computed here under the
steps' autocast) and DIR/action_model.pt (the action head as initialised from the seed; everything else comes from
the snapshot), and fills our prompt store. `ours --latents` times the steps on batch_latents.pkl (no VAE, no video).
`ours` builds our framework with its freezing and optimizer; `original` imports the original's framework from its
checkout, first on sys.path and ours off it (both packages are named DiT4DiT), and freezes with its own
freeze_backbones and optimizer groups. Both then run `--steps` steps of forward, backward (action loss +
loss_scale.future_video x video loss), gradient clipping and AdamW on the same batch, from the same torch seed, and
write each step's seconds and losses, the trainable parameter names' count and digest, the peak RSS, and the
action head's sampled actions for seeded features (where the two must agree to float32 rounding).
bench/full_size_rehearsal.py --original runs them interleaved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
# An import failure on the original's side exits with this code and one line; the rehearsal passes it on.
INCOMPATIBLE = 2
HEAD = "action_model.pt"
LATENT_BATCH = "batch_latents.pkl"


def rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def timed_steps(model, batch: list[dict], optimizer, cfg, total_of, steps: int, seed: int) -> list[dict]:
    """`steps` optimizer steps on `batch`: forward, backward, optimizer seconds and the losses of each.

    With trainer.mixed_precision bf16 the forward runs under the CPU's bf16 autocast, the stand-in for the
    torch.autocast("cuda", bf16) both train steps enter on a device: the original needs it (its video pass feeds
    float32 latents to the bf16 transformer and relies on autocast to cast them), and both sides get the same."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    clip = float(cfg.trainer.gradient_clipping)
    bf16 = cfg.trainer.mixed_precision == "bf16"
    torch.manual_seed(seed)
    rows = []
    for _ in range(steps):
        # CPU seconds (every thread's) are the step's work; wall seconds add what else the machine ran, and major
        # page faults count the frozen weights read back from disk after the kernel dropped their mapped pages.
        cpu, faults = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            losses = model(batch)
        total = total_of(losses)
        forward = time.perf_counter()
        total.backward()
        backward = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(trainable, clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end = time.perf_counter()
        rows.append({"forward_s": forward - start, "backward_s": backward - forward, "optimizer_s": end - backward,
                     "step_s": end - start, "cpu_s": time.process_time() - cpu,
                     "major_faults": resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults,
                     "total_loss": float(total),
                     **{name: float(value) for name, value in losses.items()}})
    return rows


def head_prediction(model, batch: list[dict], cfg, seed: int) -> list | None:
    """The action head's sampled actions for seeded features and the batch's state, in float32: the backbones'
    noise is not in the way here, so ours and the original's must agree (the same weights, one draw of starting
    noise, the same Euler steps)."""
    if model.action_model is None:
        return None
    torch.manual_seed(seed)
    features = torch.randn(len(batch), 16, int(cfg.framework.cosmos25.vl_hidden_dim))
    state = torch.as_tensor(np.stack([e["state"] for e in batch]), dtype=torch.float32) if "state" in batch[0] else None
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.action_model.predict_action(features, state).tolist()


def run(model, cfg, batch: list[dict], optimizer, total_of, args, side: str, loaded_s: float) -> None:
    names = sorted(name for name, p in model.named_parameters() if p.requires_grad)
    predicted = head_prediction(model, batch, cfg, args.seed)
    at_rest = rss_gib()
    rows = timed_steps(model, batch, optimizer, cfg, total_of, args.steps, args.seed)
    result = {"side": side, "load_s": loaded_s, "autocast": cfg.trainer.mixed_precision, "steps": rows,
              "rss_before_steps_gib": at_rest,
              "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
              "trainable_tensors": len(names),
              "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
              "trainable_names_sha256": hashlib.sha256("\n".join(names).encode()).hexdigest(),
              "head_prediction": predicted}
    Path(args.result).write_text(json.dumps(result, indent=1))


def load_batch(work: Path, latents: bool = False) -> list[dict]:
    with open(work / (LATENT_BATCH if latents else "batch.pkl"), "rb") as f:
        return pickle.load(f)


def load_action_head(model, work: Path) -> None:
    """The action head is not in the snapshot: both sides load the one `prepare` initialised (its parameter names
    are the original's), so every weight is the same on both."""
    if model.action_model is not None:
        model.action_model.load_state_dict(torch.load(work / HEAD, weights_only=True), strict=True)


def prepare(args, overrides: list[str]) -> None:
    sys.path.insert(0, str(REPO))
    from DiT4DiT.config.schema import load_config, normalize_cli_overrides
    from DiT4DiT.dataloader import build_vla_dataset
    from DiT4DiT.training.checkpoint import save_config

    cfg = load_config(args.config_yaml, normalize_cli_overrides(overrides))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    train_set = build_vla_dataset(cfg.datasets.vla_data, cfg.framework.action_model.chunk_length, cfg.seed)
    batch = [train_set[i] for i in range(cfg.datasets.vla_data.per_device_batch_size)]
    with open(out / "batch.pkl", "wb") as f:
        pickle.dump(batch, f)
    torch.manual_seed(cfg.seed)
    model = build_ours(out)[0]
    if model.action_model is not None:
        torch.save(model.action_model.state_dict(), out / HEAD)
    model.prepare_prompts([example["lang"] for example in batch])  # the store the timed processes read
    with open(out / LATENT_BATCH, "wb") as f:
        pickle.dump(stored_examples(model, cfg, batch), f)


def stored_examples(model, cfg, batch: list[dict]) -> list[dict]:
    """The batch as the latent store serves it: each example's clip posterior (as the store computes it, under the
    autocast the timed steps run) in place of its frames."""
    backbone = model.backbone_interface
    video = torch.stack([torch.stack(example["image"]) for example in batch])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.trainer.mixed_precision == "bf16"):
        posterior = backbone.extractor.clip_posterior(video, backbone.num_frames_out,
                                                      with_future=backbone.training_mode != "action")
    return [{**{k: v for k, v in example.items() if k != "image"},
             "latents": {"mean": posterior.mean[i].clone(), "std": posterior.std[i].clone()}}
            for i, example in enumerate(batch)]


def build_ours(work: Path):
    sys.path.insert(0, str(REPO))
    from DiT4DiT.config.schema import load_config
    from DiT4DiT.model.framework import build_framework
    from DiT4DiT.training.train import build_optimizer, compose_loss
    from DiT4DiT.training.trainer import set_up_model

    cfg = load_config(work / "config.yaml")
    settings = cfg.trainer
    model = set_up_model(build_framework(cfg), settings, None, deepspeed=False)
    return (model, cfg, lambda: build_optimizer(model, settings), lambda losses: compose_loss(losses, settings.loss_scale))


def ours(args) -> None:
    start = time.perf_counter()
    model, cfg, optimizer, total_of = build_ours(Path(args.work))
    load_action_head(model, Path(args.work))
    batch = load_batch(Path(args.work), args.latents)
    model.prepare_prompts([example["lang"] for example in batch])  # read from the store; the encoder released
    run(model, cfg, batch, optimizer(), total_of, args, "ours (latent store)" if args.latents else "ours",
        time.perf_counter() - start)


def import_original(checkout: Path):
    """The original's framework builder and trainer tools, from `checkout` alone: every path that holds another
    DiT4DiT package (ours, through PYTHONPATH or the venv's .pth) leaves sys.path."""
    if not (checkout / "DiT4DiT" / "model" / "framework" / "DiT4DiT.py").is_file():
        print(f"--original {checkout}: no DiT4DiT/model/framework/DiT4DiT.py there; pass a checkout of the original "
              "DiT4DiT (github.com/Mondo-Robotics/DiT4DiT)", file=sys.stderr)
        raise SystemExit(INCOMPATIBLE)
    sys.path[:] = [str(checkout)] + [p for p in sys.path if not (Path(p or ".") / "DiT4DiT" / "__init__.py").is_file()]
    try:
        from DiT4DiT.model.framework import build_framework
        from DiT4DiT.training.trainer_utils.trainer_tools import TrainerUtils, build_param_lr_groups
    except Exception as error:  # ImportError, or the logging config that names a missing module (rich)
        cause = error
        while cause.__cause__ is not None:
            cause = cause.__cause__
        print(f"--original {checkout}: its framework does not import with {sys.executable}: "
              f"{type(cause).__name__}: {cause}; install what it names in an environment of its own and pass "
              "--original_python (docs/full-size.md)", file=sys.stderr)
        raise SystemExit(INCOMPATIBLE) from None
    import DiT4DiT

    assert Path(DiT4DiT.__file__).is_relative_to(checkout), DiT4DiT.__file__
    return build_framework, TrainerUtils, build_param_lr_groups


def original(args) -> None:
    start = time.perf_counter()
    build_framework, trainer_utils, param_groups = import_original(Path(args.checkout).resolve())
    if args.check:
        print("imports")
        return
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(args.work) / "config.yaml")
    model = build_framework(cfg)
    trainer_utils.freeze_backbones(model, cfg.trainer.freeze_modules)
    load_action_head(model, Path(args.work))
    settings = cfg.trainer.optimizer
    optimizer = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.trainer.learning_rate.base,
                                  betas=tuple(settings.betas), weight_decay=settings.weight_decay, eps=settings.eps)
    run(model, cfg, load_batch(Path(args.work)), optimizer, original_total(cfg), args, "original",
        time.perf_counter() - start)


def original_total(cfg):
    """The original's Trainer._train_step total (a method of its trainer, so restated): the action loss plus
    loss_scale.future_video times the video loss, whichever the mode returns."""
    scale = float(cfg.trainer.loss_scale.future_video)
    return lambda losses: losses.get("action_loss", 0.0) + scale * losses.get("future_video_loss", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sides = parser.add_subparsers(dest="side", required=True)
    prep = sides.add_parser("prepare", help="write config.yaml and batch.pkl; fill our prompt store")
    prep.add_argument("--config_yaml", required=True)
    prep.add_argument("--out", required=True)
    for name in ("ours", "original"):
        side = sides.add_parser(name)
        side.add_argument("--work", help="the folder `prepare` wrote")
        side.add_argument("--result", help="JSON written at the end")
        side.add_argument("--steps", type=int, default=2)
        side.add_argument("--seed", type=int, default=0)
    sides.choices["ours"].add_argument("--latents", action="store_true",
                                       help="the batch as the latent store serves it (batch_latents.pkl)")
    sides.choices["original"].add_argument("--checkout", required=True, help="a checkout of the original DiT4DiT")
    sides.choices["original"].add_argument("--check", action="store_true", help="only check that it imports")
    args, overrides = parser.parse_known_args()
    if args.side == "prepare":
        prepare(args, overrides)
    elif overrides:
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    elif not getattr(args, "check", False) and not (args.work and args.result):
        parser.error(f"{args.side}: --work and --result are required")
    else:
        {"ours": ours, "original": original}[args.side](args)


if __name__ == "__main__":
    main()
