"""Named dataset mixtures: `datasets.vla_data.data_mix` → (dataset folder, sampling weight, data config) entries."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import NamedTuple

from DiT4DiT.config.schema import ConfigError

ROBOTWIN_TASKS = (
    "adjust_bottle", "beat_block_hammer", "blocks_ranking_rgb", "blocks_ranking_size", "click_alarmclock",
    "click_bell", "dump_bin_bigbin", "grab_roller", "handover_block", "handover_mic", "hanging_mug", "lift_pot",
    "move_can_pot", "move_pillbottle_pad", "move_playingcard_away", "move_stapler_pad", "open_laptop",
    "open_microwave", "pick_diverse_bottles", "pick_dual_bottles", "place_a2b_left", "place_a2b_right",
    "place_bread_basket", "place_bread_skillet", "place_burger_fries", "place_can_basket", "place_cans_plasticbox",
    "place_container_plate", "place_dual_shoes", "place_empty_cup", "place_fan", "place_mouse_pad",
    "place_object_basket", "place_object_scale", "place_object_stand", "place_phone_stand", "place_shoe",
    "press_stapler", "put_bottles_dustbin", "put_object_cabinet", "rotate_qrcode", "scan_object", "shake_bottle",
    "shake_bottle_horizontally", "stack_blocks_three", "stack_blocks_two", "stack_bowls_three", "stack_bowls_two",
    "stamp_seal", "turn_switch",
)


class MixtureEntry(NamedTuple):
    dataset: str  # folder under data_root_dir (may contain '/')
    weight: float  # sampling weight
    data_config: str  # key of DATA_CONFIGS


def _both_splits(data_config: str) -> list[MixtureEntry]:
    return [MixtureEntry(f"{split}/{task}", 1.0, data_config)
            for task in ROBOTWIN_TASKS for split in ("Clean", "Randomized")]


DATASET_NAMED_MIXTURES: dict[str, list[MixtureEntry]] = {
    "robotwin": [MixtureEntry(task, 1.0, "robotwin") for task in ROBOTWIN_TASKS],
    "robotwin_all": _both_splits("robotwin"),
    "robotwin_all_50": _both_splits("robotwin50"),
    "robotwin_task1": [MixtureEntry("adjust_bottle", 1.0, "robotwin")],
    "robotwin_task2": [MixtureEntry("place_a2b_left", 1.0, "robotwin"), MixtureEntry("place_a2b_right", 1.0, "robotwin")],
    "gr1_pick_place": [MixtureEntry("robot_sim.PickNPlace", 1.0, "fourier_gr1_arms_hands")],
}


def resolve_mixture(name: str) -> list[MixtureEntry]:
    """The entries of a named mixture, duplicates of (dataset, data config) dropped."""
    if name not in DATASET_NAMED_MIXTURES:
        valid = list(DATASET_NAMED_MIXTURES)
        ranked = difflib.get_close_matches(name, valid, n=len(valid), cutoff=0.0)
        raise ConfigError(f"datasets.vla_data.data_mix={name!r} is not a known mixture; valid names: {', '.join(ranked)}")
    seen, entries = set(), []
    for entry in DATASET_NAMED_MIXTURES[name]:
        if (entry.dataset, entry.data_config) not in seen:
            seen.add((entry.dataset, entry.data_config))
            entries.append(entry)
    return entries


def mixture_presence(entries: list[MixtureEntry], root: Path, data_mix: str) -> tuple[list[MixtureEntry], list[str], str | None]:
    """The one completeness rule (trainer and launcher preflight): datasets are folders under the data root;
    missing ones are skipped with a warning, and at least one must be there.

    Returns (present entries, missing dataset names, the problem when none is present).
    """
    found = [e for e in entries if (Path(root) / e.dataset).is_dir()]
    missing = [e.dataset for e in entries if e not in found]
    problem = None
    if not found:
        problem = (f"datasets.vla_data.data_mix={data_mix}: none of its {len(entries)} datasets is under "
                   f"datasets.vla_data.data_root_dir={root} (expected folders such as {', '.join(missing[:3])}); point "
                   "data_root_dir at the folder holding them")
    return found, missing, problem
