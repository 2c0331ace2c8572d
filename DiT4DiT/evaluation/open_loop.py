"""Open-loop evaluation: predicted against recorded actions on held-out episodes, with errors and plots.

    python -m DiT4DiT.evaluation.open_loop --ckpt RUN/checkpoints/steps_N_pytorch_model.pt \
        --data_root_dir DIR --data_mix NAME [--episodes N] [--base_model SNAPSHOT] --out OUT

Along each episode the model predicts a chunk at steps 0, chunk, 2 x chunk, ... from the recorded observation (as a
robot executing whole chunks would query it), in the robot's units. OUT gets `summary.json` (overall and per-joint
MSE / MAE, per episode too), `per_joint_error.png`, and one `episode_<dataset>_<n>.png` per episode.
The episodes are the run's held-out ones (`datasets.vla_data.holdout_episodes` from the end of each dataset).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np
import torch

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.config.errors import ConfigError
from DiT4DiT.dataloader.dataset import combine_views
from DiT4DiT.dataloader.transforms import StateEncoder
from DiT4DiT.errors import run_main
from DiT4DiT.evaluation.plots import plot_episode, plot_joint_errors
from DiT4DiT.logging_setup import configure_logging
from DiT4DiT.model.framework.base_framework import BASE_MODEL_ENV, load_run_config
from DiT4DiT.serving.device import DEVICE_CHOICES
from DiT4DiT.serving.policy import Policy

log = logging.getLogger("dit4dit.open_loop")

QUERIES_PER_BATCH = 16


def joint_names(part) -> list[str]:
    """`<key>.<i>` for every action dim of a dataset, in the model's output order."""
    return [f"{key.split('.', 1)[-1]}.{i}" for key, s in zip(part.config.action_keys, part.action_slices)
            for i in range(s.width)]


def evaluate_episode(policy: Policy, part, decode, episode_position: int) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, recorded) actions (steps, dims) of one episode, in the robot's units."""
    first = int(part.ends[episode_position - 1]) if episode_position else 0
    length = int(part.ends[episode_position]) - first
    chunk = policy.shape.chunk
    encode_state = StateEncoder(policy.statistics["state"], policy.shape.state_dim) if policy.shape.state_dim else None
    examples, recorded = [], []
    for t in range(0, length, chunk):
        raw = part.read(first + t, decode)
        # The current frame of each camera, combined in the run's layout as training combined them.
        current = combine_views([view[:1] for view in raw.views], policy.shape.image_size, policy.shape.views)
        example = {"image": current[:1], "lang": raw.lang}
        if encode_state is not None:
            example["state"] = encode_state(raw.state)
        examples.append(example)
        recorded.append(raw.action)
    predicted = np.concatenate([policy.infer(examples[i:i + QUERIES_PER_BATCH])["actions"]
                                for i in range(0, len(examples), QUERIES_PER_BATCH)])
    width = recorded[0].shape[1]
    if predicted.shape[-1] != width:
        raise ConfigError(f"{part.layout.root}: episodes record {width}-dim actions but the run's statistics describe "
                          f"{predicted.shape[-1]}; evaluate on data of the robot the model was trained for")
    return predicted.reshape(-1, width)[:length], np.concatenate(recorded)[:length]


def evaluate(policy: Policy, dataset, episodes: int, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    per_episode: list[dict[str, object]] = []
    errors: list[np.ndarray] = []
    names: list[str] = []  # the first dataset's joints
    for part in dataset.parts:
        for position, episode in enumerate(part.episodes):
            if len(per_episode) >= episodes:
                break
            predicted, recorded = evaluate_episode(policy, part, dataset.frame_decoder, position)
            names = names or joint_names(part)
            error = predicted.astype(np.float64) - recorded
            errors.append(error)
            label = f"{part.layout.root.name}_{int(episode)}"
            plot = plot_episode(predicted, recorded, names, policy.shape.chunk,
                                f"{part.layout.root.name}, episode {int(episode)}: predicted vs recorded",
                                out / f"episode_{label}.png")
            per_episode.append({"dataset": part.layout.root.name, "episode": int(episode), "steps": len(error),
                                "mse": float(np.mean(error**2)), "mae": float(np.mean(np.abs(error))),
                                "plot": plot.name})
            log.info("%s: %d steps, MSE %.5f, MAE %.5f", label, len(error), per_episode[-1]["mse"],
                     per_episode[-1]["mae"])
    if not per_episode:
        raise ConfigError("no held-out episode to evaluate: the mixture's eval split is empty; give --data_mix a "
                          "mixture with held-out episodes (datasets.vla_data.holdout_episodes > 0 in the run)")
    stacked = np.concatenate(errors)
    mse, mae = np.mean(stacked**2, axis=0), np.mean(np.abs(stacked), axis=0)
    plot_joint_errors(mse, mae, names, out / "per_joint_error.png")
    summary = {"mse": float(np.mean(stacked**2)), "mae": float(np.mean(np.abs(stacked))), "steps": len(stacked),
               "action_chunk": policy.shape.chunk, "joints": names,
               "per_joint": {"mse": mse.tolist(), "mae": mae.tolist()}, "episodes": per_episode}
    write_json_atomic(out / "summary.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.evaluation.open_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="RUN/checkpoints/steps_N_pytorch_model.pt")
    parser.add_argument("--data_root_dir", default=None, help="folder of a named mixture's datasets (not needed when "
                        "--data_mix is a path)")
    parser.add_argument("--data_mix", required=True)
    parser.add_argument("--episodes", type=int, default=4, help="most episodes to evaluate")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES,
                        help="auto takes the first accelerator present, else the CPU")
    parser.add_argument("--unnorm_key", default=None)
    parser.add_argument("--cache_dir", default=None, help="index cache (default: the run's datasets.vla_data.cache_dir)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the flow-matching noise")
    parser.add_argument("--base_model", default=os.environ.get(BASE_MODEL_ENV),
                        help="the local Cosmos snapshot, for a run folder made elsewhere whose recorded "
                             f"framework.cosmos25.base_model does not exist here (default: ${BASE_MODEL_ENV})")
    args = parser.parse_args(argv)
    configure_logging()
    return run_main(lambda: evaluate_run(args))


def evaluate_run(args: argparse.Namespace) -> None:
    from DiT4DiT.dataloader.build import build_vla_dataset
    from DiT4DiT.serving.device import select_device
    from DiT4DiT.host.output_paths import check_out

    overrides = [f"datasets.vla_data.data_mix={args.data_mix}"]
    if args.data_root_dir:
        overrides.append(f"datasets.vla_data.data_root_dir={args.data_root_dir}")
    if args.cache_dir:
        overrides.append(f"datasets.vla_data.cache_dir={args.cache_dir}")
    if args.cache_dir:  # the data's index cache is written there: a folder of ours, not a file or a dataset
        check_out(Path(args.cache_dir), folder=True, option="--cache_dir")
    device = select_device(args.device)
    policy = Policy.load(args.ckpt, device, unnorm_key=args.unnorm_key, base_model=args.base_model)
    # The run's config as the model loaded it (completed from the checkpoint, on the local snapshot), on this data.
    run = load_run_config(args.ckpt, args.base_model, overrides)
    dataset = build_vla_dataset(run.datasets.vla_data, run.framework.action_model.chunk_length, run.seed, split="eval")
    torch.manual_seed(args.seed)
    summary = evaluate(policy, dataset, args.episodes, Path(args.out))
    print(f"{len(summary['episodes'])} episodes, {summary['steps']} steps: MSE {summary['mse']:.5f}, "
          f"MAE {summary['mae']:.5f}; plots and summary.json in {args.out}")


if __name__ == "__main__":
    sys.exit(main())
