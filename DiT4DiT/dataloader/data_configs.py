"""Data configs: which cameras, state/action keys, language key and normalisation a robot's datasets use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataConfig:
    """The keys one robot type reads from modality.json, in output order, and how each is normalised.

    `action_horizon` is the action-chunk length fixed by the config's name (robotwin50 → 50); None means it
    follows framework.action_model.future_action_window_size + 1.
    """

    name: str
    video_keys: tuple[str, ...]
    state_keys: tuple[str, ...]
    action_keys: tuple[str, ...]
    language_key: str
    normalization: dict[str, str]
    embodiment_tag: str
    action_horizon: int | None = None

    def ordered_video_keys(self) -> tuple[str, ...]:
        """Primary views first, then wrist views, each group in config order (the side-by-side order)."""
        primary = tuple(k for k in self.video_keys if "wrist" not in k)
        return primary + tuple(k for k in self.video_keys if "wrist" in k)

    def binary_keys(self) -> set[str]:
        """Keys that are on/off rather than continuous: their action dims are masked out when un-normalising."""
        return {k for k, mode in self.normalization.items() if mode == "binary" or "gripper" in k}


def _robotwin(name: str, action_horizon: int | None) -> DataConfig:
    # RoboTwin (aloha-agilex): two 6-joint arms and two grippers; output order [L6, R6, Lg, Rg].
    parts = ("left_joints", "right_joints", "left_gripper", "right_gripper")
    modes = {f"{group}.{p}": ("binary" if "gripper" in p else "min_max") for group in ("state", "action") for p in parts}
    return DataConfig(
        name=name,
        video_keys=("video.cam_high", "video.cam_left_wrist", "video.cam_right_wrist"),
        state_keys=tuple(f"state.{p}" for p in parts),
        action_keys=tuple(f"action.{p}" for p in parts),
        language_key="annotation.human.action.task_description",
        normalization=modes,
        embodiment_tag="new_embodiment",
        action_horizon=action_horizon,
    )


def _fourier_gr1_arms_hands() -> DataConfig:
    # Fourier GR1 humanoid, arms and hands only (robot_sim.PickNPlace): 7 + 7 + 6 + 6 = 26 dims.
    parts = ("left_arm", "right_arm", "left_hand", "right_hand")
    return DataConfig(
        name="fourier_gr1_arms_hands",
        video_keys=("video.ego_view",),
        state_keys=tuple(f"state.{p}" for p in parts),
        action_keys=tuple(f"action.{p}" for p in parts),
        language_key="annotation.human.action.task_description",
        normalization={f"{group}.{p}": "min_max" for group in ("state", "action") for p in parts},
        embodiment_tag="gr1",
    )


DATA_CONFIGS: dict[str, DataConfig] = {
    "robotwin": _robotwin("robotwin", None),
    "robotwin50": _robotwin("robotwin50", 50),
    "fourier_gr1_arms_hands": _fourier_gr1_arms_hands(),
}
