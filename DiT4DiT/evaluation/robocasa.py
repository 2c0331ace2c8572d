"""RoboCasa (GR1 tabletop) through the policy server: batched observations -> requests, the first n_action_steps
of each chunk (or one adaptively ensembled action) executed, success rates.

    python -m DiT4DiT.evaluation.robocasa --port 10093 --out results/robocasa --env_names ENV[,ENV...]

needs robocasa, robosuite and gymnasium plus the original's MultiStepWrapper-style environment
(`gr1_unified/...` gym ids); none is part of this repository's requirements.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

from DiT4DiT.errors import run_main
from DiT4DiT.evaluation.ensemble import AdaptiveEnsembler, check_horizon
from DiT4DiT.evaluation.errors import BadArgument, SimulatorError
from DiT4DiT.evaluation.observations import StateEncoder, camera_fields
from DiT4DiT.evaluation.server_policy import connect_to
from DiT4DiT.evaluation.summary import render, summarize, write_task_result
from DiT4DiT.logging_setup import configure_logging

log = logging.getLogger("dit4dit.robocasa")

# The GR1 arms + hands + waist layout of the original's RoboCasa client (state and action share it).
GR1_PARTS = (("left_arm", 7), ("right_arm", 7), ("left_hand", 6), ("right_hand", 6), ("waist", 3))
VIDEO_KEY = "video.ego_view"
INSTRUCTION_KEY = "annotation.human.coarse_action"
WAIT_S = 300.0  # how long to wait for the policy server to accept (the client's default)


class RobocasaPolicy:
    """One request per environment step for all N environments; actions split into the env's action keys."""

    def __init__(self, client, n_action_steps: int, parts=GR1_PARTS, ensemble_horizon: int = 0, alpha: float = 0.1):
        self.client = client
        meta = self.metadata = client.metadata
        self.chunk = int(meta["action_chunk"])
        self.parts = tuple(parts)
        if not 1 <= n_action_steps <= self.chunk:
            raise BadArgument(f"--n_action_steps {n_action_steps}: use 1..{self.chunk} (the served chunk length)")
        if ensemble_horizon:
            check_horizon(ensemble_horizon, self.chunk)
        width = sum(w for _, w in self.parts)
        if width != int(meta["action_dim"]):
            raise SimulatorError(f"the served model returns {meta['action_dim']}-dim actions but the parts "
                                 f"{[name for name, _ in self.parts]} add up to {width}; serve a model trained on "
                                 "this robot's layout")
        self.n_action_steps = n_action_steps
        self.encode_state = StateEncoder(meta) if int(meta["state_dim"]) else None
        self.ensemble_horizon, self.alpha = int(ensemble_horizon), float(alpha)
        self._ensemblers: list[AdaptiveEnsembler] = []

    def reset(self) -> None:
        for ensembler in self._ensemblers:
            ensembler.reset()

    def reset_env(self, index: int) -> None:
        """A new episode in environment `index`: its ensemble history no longer applies."""
        if index < len(self._ensemblers):
            self._ensemblers[index].reset()

    def act(self, obs: dict) -> dict[str, np.ndarray]:
        """{"action.<part>": (N, steps, width)}; steps = n_action_steps, or 1 when ensembling."""
        videos = np.asarray(obs[VIDEO_KEY])  # (N, T, H, W, 3); the newest frame conditions
        states = np.concatenate([np.asarray(obs[f"state.{name}"])[:, -1] for name, _ in self.parts], axis=-1)
        instructions = list(obs[INSTRUCTION_KEY])
        examples = []
        for index in range(len(videos)):
            example = {**camera_fields([videos[index, -1]], self.metadata), "lang": str(instructions[index])}
            if self.encode_state is not None:
                example["state"] = self.encode_state(states[index])
            examples.append(example)
        actions = self.client.infer(examples)["actions"]  # (N, chunk, D) in robot units
        if self.ensemble_horizon:
            while len(self._ensemblers) < len(actions):  # one history per environment, never shared
                self._ensemblers.append(AdaptiveEnsembler(self.ensemble_horizon, self.alpha))
            actions = np.stack([self._ensemblers[i](chunk)[None] for i, chunk in enumerate(actions)])
        else:
            actions = actions[:, : self.n_action_steps]
        out, start = {}, 0
        for name, width in self.parts:
            out[f"action.{name}"] = actions[..., start:start + width].astype(np.float32)
            start += width
        return out


def run_robocasa(policy: RobocasaPolicy, env, n_episodes: int) -> list[bool]:
    """Episode outcomes from a vector env (reset/step as gymnasium's, info["success"] per env) until n_episodes end."""
    outcomes: list[bool] = []
    obs, _ = env.reset()
    policy.reset()
    succeeded = None
    while len(outcomes) < n_episodes:
        obs, _, terminated, truncated, info = env.step(policy.act(obs))
        success = np.asarray(info["success"]).reshape(len(terminated), -1).any(axis=1)
        succeeded = success if succeeded is None else succeeded | success
        for index in np.flatnonzero(np.asarray(terminated) | np.asarray(truncated)):
            outcomes.append(bool(succeeded[index]))
            succeeded[index] = False
            policy.reset_env(int(index))
    return outcomes[:n_episodes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.evaluation.robocasa", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10093)
    parser.add_argument("--env_names", required=True, help="comma-separated gym ids, e.g. gr1_unified/PnPMilk...")
    parser.add_argument("--n_episodes", type=int, default=50)
    parser.add_argument("--n_envs", type=int, default=1)
    parser.add_argument("--n_action_steps", type=int, default=12)
    parser.add_argument("--max_episode_steps", type=int, default=720)
    parser.add_argument("--ensemble_horizon", type=int, default=0, help="0: execute chunks; k: blend k chunks")
    parser.add_argument("--ensemble_alpha", type=float, default=0.1)
    parser.add_argument("--out", required=True, help="folder for per-task results and the summary")
    args = parser.parse_args(argv)
    configure_logging()
    return run_main(lambda: evaluate_tasks(args))


def evaluate_tasks(args: argparse.Namespace) -> None:
    # The server first: its chunk length bounds --n_action_steps and --ensemble_horizon, checked before a simulator.
    with connect_to(args.host, args.port, WAIT_S) as client:
        policy = RobocasaPolicy(client, args.n_action_steps, ensemble_horizon=args.ensemble_horizon,
                                alpha=args.ensemble_alpha)
        try:
            from examples.Robocasa_tabletop.eval_files.simulation_env import (
                MultiStepConfig, SimulationConfig, SimulationInferenceEnv)
        except ImportError as error:
            raise BadArgument(f"the RoboCasa environment is not importable ({error}); install robocasa and robosuite "
                              "and put the original DiT4DiT checkout (its examples/Robocasa_tabletop) on PYTHONPATH"
                              ) from None
        for env_name in [e for e in args.env_names.split(",") if e]:
            config = SimulationConfig(env_name=env_name, n_episodes=args.n_episodes, n_envs=args.n_envs,
                                      multistep=MultiStepConfig(n_action_steps=args.n_action_steps,
                                                                max_episode_steps=args.max_episode_steps))
            env = SimulationInferenceEnv().setup_environment(config)
            outcomes = run_robocasa(policy, env, args.n_episodes)
            env.close()
            write_task_result(Path(args.out), "robocasa", env_name, outcomes)
    print(render(summarize(Path(args.out))), end="")


if __name__ == "__main__":
    sys.exit(main())
