"""Data configs: which cameras, state/action keys, language key and normalisation a robot's datasets use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from DiT4DiT.dataloader.image_augmentation import OXE_DROID, ImageAugmentation


@dataclass(frozen=True)
class DataConfig:
    """The keys one robot type reads from modality.json, in output order, and how each is normalised.

    `action_horizon` is the action-chunk length fixed by the config's name (robotwin50 → 50); None means it
    follows framework.action_model.future_action_window_size + 1. `state_layout` / `action_layout` say how this
    robot's LeRobot datasets store the keys in `observation.state` / `action`: (key, width) in column order, which
    is what a modality.json derived from info.json slices. `views` is how several cameras are combined:
    `side_by_side` (one wide frame per time step) or `as_frames` (each camera's frames as extra time steps, the
    original's layout for configs with two non-wrist cameras). `augmentation` is the image augmentation the
    original's data config applies (its video transforms), None for none.
    """

    name: str
    video_keys: tuple[str, ...]
    state_keys: tuple[str, ...]
    action_keys: tuple[str, ...]
    language_key: str
    normalization: dict[str, str]
    embodiment_tag: str
    state_layout: tuple[tuple[str, int], ...]
    action_layout: tuple[tuple[str, int], ...]
    action_horizon: int | None = None
    views: str = "side_by_side"
    augmentation: ImageAugmentation | None = None

    def ordered_video_keys(self) -> tuple[str, ...]:
        """Primary views first, then wrist views, each group in config order (the side-by-side order)."""
        primary = tuple(k for k in self.video_keys if "wrist" not in k)
        return primary + tuple(k for k in self.video_keys if "wrist" in k)

    def binary_keys(self) -> set[str]:
        """Keys that are on/off rather than continuous: their action dims are masked out when un-normalising."""
        return {k for k, mode in self.normalization.items() if mode == "binary" or "gripper" in k}


TASK_DESCRIPTION = "annotation.human.action.task_description"
VIEW_LAYOUTS = ("side_by_side", "as_frames")


def auto_views(layouts: Mapping[str, str], conflict: Callable[[str], Exception]) -> str:
    """What datasets.vla_data.views=auto resolves to, for training and for serving alike: the one layout of the data
    configs that combine several cameras (`layouts`: {views: whose}), side_by_side when none does; `conflict(listing)`
    is the caller's error when they combine cameras both ways."""
    if len(layouts) > 1:
        raise conflict(", ".join(f"{whose}: {views}" for views, whose in sorted(layouts.items())))
    return next(iter(layouts), "side_by_side")


def _config(name: str, *, video: tuple[str, ...], state: tuple[str, ...], action: tuple[str, ...], modes: dict[str, str],
            tag: str, widths: dict[str, int], stored_order: tuple[str, ...] | None = None,
            language: str = TASK_DESCRIPTION, action_horizon: int | None = None,
            views: str = "side_by_side", augmentation: ImageAugmentation | None = None) -> DataConfig:
    """A data config from short key names (`video.`/`state.`/`action.` added); keys without a mode stay raw,
    as in the original, where a key missing from normalization_modes is passed through unchanged. `widths` gives
    each short key's width; `stored_order` the keys' order in the dataset columns when it is not the config's."""
    keys = {"video": tuple(f"video.{k}" for k in video), "state": tuple(f"state.{k}" for k in state),
            "action": tuple(f"action.{k}" for k in action)}
    unknown = set(modes) - set(keys["state"]) - set(keys["action"])
    if unknown:
        raise ValueError(f"data config {name}: modes for keys it does not read: {sorted(unknown)}")
    normalization = {k: modes.get(k, "identity") for k in keys["state"] + keys["action"]}

    def layout(short_keys):
        order = [k for k in stored_order if k in short_keys] if stored_order else short_keys
        return tuple((k, widths[k]) for k in order)

    return DataConfig(name=name, video_keys=keys["video"], state_keys=keys["state"], action_keys=keys["action"],
                      language_key=language, normalization=normalization, embodiment_tag=tag,
                      state_layout=layout(state), action_layout=layout(action), action_horizon=action_horizon,
                      views=views, augmentation=augmentation)


def _each(prefix: str, keys: tuple[str, ...], mode: str) -> dict[str, str]:
    return {f"{prefix}.{k}": mode for k in keys}


class _Robot(TypedDict):
    """The _config arguments that the data configs of one robot share."""

    video: tuple[str, ...]
    state: tuple[str, ...]
    action: tuple[str, ...]
    modes: dict[str, str]
    tag: str
    widths: dict[str, int]
    stored_order: tuple[str, ...]


# The original's data configs (its ROBOT_TYPE_CONFIG_MAP), by name: cameras, keys, language key, normalisation
# modes and embodiment tag (its ROBOT_TYPE_TO_EMBODIMENT_TAG, new_embodiment where it has none).
ARMS = ("left_joints", "right_joints", "left_gripper", "right_gripper")
AGILEX_MODES = {**_each("state", ARMS[:2], "min_max"), **_each("state", ARMS[2:], "binary"),
                **_each("action", ARMS[:2], "min_max"), **_each("action", ARMS[2:], "binary")}
AGILEX_CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")
POSE = ("x", "y", "z", "roll", "pitch", "yaw")
LIBERO_STATE = (*POSE, "pad", "gripper")
OXE_ACTION = (*POSE, "gripper")
RT1_STATE = ("x", "y", "z", "rx", "ry", "rz", "rw", "gripper")
GR1_PARTS = ("left_arm", "right_arm", "left_hand", "right_hand", "waist")
G1_PARTS = ("left_arm", "right_arm", "left_gripper", "right_gripper")
SO101_JOINTS = tuple(f"{j}.pos" for j in ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll",
                                          "gripper"))
# Width of each key as the robots' datasets store them.
AGILEX_WIDTHS = {"left_joints": 6, "right_joints": 6, "left_gripper": 1, "right_gripper": 1}
# RoboTwin's LeRobot conversions store [L6 joints, L gripper, R6 joints, R gripper] (StarVLA's modality.json).
AGILEX_ORDER = ("left_joints", "left_gripper", "right_joints", "right_gripper")
SCALARS = {k: 1 for k in (*POSE, "pad", "gripper", "rx", "ry", "rz", "rw", *SO101_JOINTS)}
GR1_WIDTHS = {"left_arm": 7, "right_arm": 7, "left_hand": 6, "right_hand": 6, "waist": 3}
G1_WIDTHS = {"left_arm": 7, "right_arm": 7, "left_gripper": 1, "right_gripper": 1}

AGILEX: _Robot = {"video": AGILEX_CAMERAS, "state": ARMS, "action": ARMS, "modes": AGILEX_MODES,
                  "tag": "new_embodiment", "widths": AGILEX_WIDTHS, "stored_order": AGILEX_ORDER}

DATA_CONFIGS: dict[str, DataConfig] = {
    # RoboTwin 2.0 (aloha-agilex): two 6-joint arms and two grippers; output order [L6, R6, Lg, Rg].
    "robotwin": _config("robotwin", **AGILEX),
    # The same with 50-step action chunks (its 0.49 binary threshold is ignored by the original: 0.5 stays).
    "robotwin50": _config("robotwin50", **AGILEX, action_horizon=50),
    "arx_x5": _config("arx_x5", **AGILEX),
    # LIBERO (Franka): state as sin/cos of each of 8 values (16 dims), pose actions min_max, gripper raw.
    "libero_franka": _config("libero_franka", video=("primary_image", "wrist_image"), state=LIBERO_STATE,
                             action=OXE_ACTION, modes={**_each("state", LIBERO_STATE, "sincos"),
                                                       **_each("action", POSE, "min_max")}, tag="franka",
                             widths=SCALARS),
    "oxe_droid": _config("oxe_droid", video=("exterior_image_1", "exterior_image_2", "wrist_image"),
                         state=("eef_position", "eef_rotation", "gripper_position"),
                         action=("eef_position_delta", "eef_rotation_delta", "gripper_position"),
                         modes={"state.eef_position": "min_max", "state.gripper_position": "min_max",
                                "action.gripper_position": "binary"},
                         tag="oxe_droid", language="annotation.language.language_instruction",
                         widths={"eef_position": 3, "eef_rotation": 4, "gripper_position": 1,
                                 "eef_position_delta": 3, "eef_rotation_delta": 3}, views="as_frames",
                         augmentation=OXE_DROID),
    "oxe_bridge": _config("oxe_bridge", video=("image_0",), state=LIBERO_STATE, action=OXE_ACTION,
                          modes={**_each("state", LIBERO_STATE[:-1], "q99"), "state.gripper": "binary",
                                 **_each("action", POSE, "q99"), "action.gripper": "binary"}, tag="oxe_bridge",
                          widths=SCALARS),
    "oxe_rt1": _config("oxe_rt1", video=("image",), state=RT1_STATE, action=OXE_ACTION,
                       modes={**_each("state", RT1_STATE[:-1], "q99"), "state.gripper": "binary",
                              **_each("action", POSE, "q99"), "action.gripper": "binary"}, tag="oxe_rt1",
                       widths=SCALARS),
    "custom_robot_config": _config("custom_robot_config", video=("base_view", "ego_view"),
                                   state=("eef_position", "eef_rotation"),
                                   action=("delta_eef_position", "delta_eef_rotation", "gripper_close"),
                                   modes={"state.eef_position": "min_max", "state.eef_rotation": "min_max",
                                          "action.delta_eef_position": "min_max",
                                          "action.delta_eef_rotation": "min_max", "action.gripper_close": "binary"},
                                   tag="new_embodiment", views="as_frames",
                                   widths={"eef_position": 3, "eef_rotation": 4, "delta_eef_position": 3,
                                           "delta_eef_rotation": 3, "gripper_close": 1}),
    "demo_sim_franka_delta_joints": _config("demo_sim_franka_delta_joints", video=("base_view", "ego_view"),
                                            state=("joints",), action=("delta_joints", "gripper_close"),
                                            modes={"state.joints": "min_max", "action.delta_joints": "min_max",
                                                   "action.gripper_close": "binary"}, tag="franka",
                                            widths={"joints": 7, "delta_joints": 7, "gripper_close": 1},
                                            views="as_frames"),
    "SO101": _config("SO101", video=("primary_image", "wrist_image"), state=SO101_JOINTS, action=SO101_JOINTS,
                     modes={**_each("state", SO101_JOINTS, "min_max"), **_each("action", SO101_JOINTS, "min_max")},
                     tag="new_embodiment", widths=SCALARS),
    # RoboCasa GR1 tabletop (Fourier GR1 arms + waist): state sin/cos (29 -> 58 dims), actions min_max.
    "fourier_gr1_arms_waist": _config("fourier_gr1_arms_waist", video=("ego_view",), state=GR1_PARTS,
                                      action=GR1_PARTS, modes={**_each("state", GR1_PARTS, "sincos"),
                                                               **_each("action", GR1_PARTS, "min_max")},
                                      tag="gr1", language="annotation.human.coarse_action", widths=GR1_WIDTHS),
    # Real Unitree G1 (arms + Aloha grippers): state sin/cos, actions min_max.
    "g1_body29_aloha_arms_only": _config("g1_body29_aloha_arms_only", video=("ego_view",), state=G1_PARTS,
                                         action=G1_PARTS, modes={**_each("state", G1_PARTS, "sincos"),
                                                                 **_each("action", G1_PARTS, "min_max")},
                                         tag="new_embodiment", language="annotation.human.task_description",
                                         widths=G1_WIDTHS),
    # Ours, for the GR00T demo data robot_sim.PickNPlace (Fourier GR1, arms and hands): 7 + 7 + 6 + 6 = 26 dims.
    "fourier_gr1_arms_hands": _config("fourier_gr1_arms_hands", video=("ego_view",), state=GR1_PARTS[:4],
                                      action=GR1_PARTS[:4], modes={**_each("state", GR1_PARTS[:4], "min_max"),
                                                                   **_each("action", GR1_PARTS[:4], "min_max")},
                                      tag="gr1", widths=GR1_WIDTHS),
}
