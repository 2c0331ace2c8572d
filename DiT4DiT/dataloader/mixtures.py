"""`datasets.vla_data.data_mix` → (dataset folder, sampling weight, data config) entries.

data_mix is a named mixture (the original's names, folders under data_root_dir), or a path: one LeRobot dataset
folder, a folder of them (one or two levels down), or a mixture file (YAML list of {path, weight, data_config}).
"""

from __future__ import annotations

import difflib
import os
from numbers import Real
from pathlib import Path
from typing import NamedTuple

import yaml

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.paths import resolved
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.layout import dataset_folders, is_dataset
from DiT4DiT.yaml_files import checked_yaml_text

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
    dataset: str  # folder under data_root_dir (may contain '/'), or an absolute path (data_mix given as a path)
    weight: float  # sampling weight
    data_config: str  # key of DATA_CONFIGS, or "auto" (the one that fits the dataset's features)


MIXTURE_FILE_SUFFIXES = (".yaml", ".yml")
MAX_WEIGHT = 1000.0  # visits per epoch; larger (or .inf) overflows the sampler's counts
# Datasets in one mixture file: every start indexes (or checks the cached index of) each, and the largest real
# mixtures have hundreds; a 100,000-entry file is a generated mistake, not a mixture.
MAX_ENTRIES = 10_000, "every start indexes each dataset; merge datasets or split the run"
ENTRY_KEYS = ("path", "weight", "data_config")


def _both_splits(data_config: str) -> list[MixtureEntry]:
    return [MixtureEntry(f"{split}/{task}", 1.0, data_config)
            for split in ("Clean", "Randomized") for task in ROBOTWIN_TASKS]


def _all(datasets, data_config: str) -> list[MixtureEntry]:
    return [MixtureEntry(d, 1.0, data_config) for d in datasets]


LIBERO_SUITES = ("object", "goal", "spatial", "10")
# RoboCasa GR1 tabletop: the 6 pick-and-place tasks and 18 post-training splits of the GR00T X-Embodiment sim data.
GR1_TABLETOP = (
    "PnPBottleToCabinetClose", "PnPCanToDrawerClose", "PnPCupToDrawerClose", "PnPMilkToMicrowaveClose",
    "PnPPotatoToMicrowaveClose", "PnPWineToCabinetClose",
    *(f"PosttrainPnPNovelFrom{pair}SplitA" for pair in (
        "CuttingboardToBasket", "CuttingboardToCardboardbox", "CuttingboardToPan", "CuttingboardToPot",
        "CuttingboardToTieredbasket", "PlacematToBasket", "PlacematToBowl", "PlacematToPlate", "PlacematToTieredshelf",
        "PlateToBowl", "PlateToCardboardbox", "PlateToPan", "PlateToPlate", "TrayToCardboardbox", "TrayToPlate",
        "TrayToPot", "TrayToTieredbasket", "TrayToTieredshelf")),
)
GR1_PRETRAIN = (
    "CanToDrawer", "CupToDrawer", "CuttingboardToBasket", "CuttingboardToCardboardBox", "CuttingboardToPan",
    "CuttingboardToPot", "CuttingboardToTieredBasket", "PlaceBottleToCabinet", "PlaceMilkToMicrowave",
    "PlacematToBasket", "PlacematToBowl", "PlacematToPlate", "PlacematToTieredShelf", "PlateToBowl",
    "PlateToCardboardBox", "PlateToPan", "PlateToPlate", "PotatoToMicrowave", "TrayToCardboardBox", "TrayToPlate",
    "TrayToPot", "TrayToTieredBasket", "TrayToTieredShelf", "WineToCabinet",
)
G1_TASKS = ("pnp_eggplant_lh_200ep_26_1_28", "pnp_corn_middle_drawer", "pnp_plate", "arrange_flower", "move_spoon",
            "stack_cups", "packaging")

# The original's 18 mixtures (same names, folders, weights and data configs), plus gr1_pick_place (ours).
DATASET_NAMED_MIXTURES: dict[str, list[MixtureEntry]] = {
    "custom_dataset": _all(["custom_dataset_name"], "custom_robot_config"),
    "custom_dataset_2": _all(["custom_dataset_name_1", "custom_dataset_name_2"], "custom_robot_config"),
    "libero_all": _all([f"libero_{s}_no_noops_1.0.0_lerobot" for s in LIBERO_SUITES], "libero_franka"),
    "bridge": _all(["bridge_orig_1.0.0_lerobot"], "oxe_bridge"),
    "bridge_rt_1": [MixtureEntry("bridge_orig_1.0.0_lerobot", 1.0, "oxe_bridge"),
                    MixtureEntry("fractal20220817_data_0.1.0_lerobot", 1.0, "oxe_rt1")],
    "demo_sim_pick_place": _all(["sim_pick_place"], "demo_sim_franka_delta_joints"),
    "fourier_gr1_unified_1000": _all(
        [f"gr1_unified.{t}_GR1ArmsAndWaistFourierHands_1000" for t in GR1_TABLETOP], "fourier_gr1_arms_waist"),
    "fourier_gr1_pretrain_10K": _all([f"gr1_arms_waist.{t}" for t in GR1_PRETRAIN], "fourier_gr1_arms_waist"),
    # The original names a data config (R1Pro) it never defines; building this mixture says so.
    "BEHAVIOR_challenge": _all(["BEHAVIOR_challenge"], "R1Pro"),
    "SO101_pick": _all(["pick_dataset_name"], "SO101"),
    "arx_x5": _all(["arx_x5"], "arx_x5"),
    "robotwin": _all(ROBOTWIN_TASKS, "robotwin"),
    "robotwin_all": _both_splits("robotwin"),
    "robotwin_all_50": _both_splits("robotwin50"),
    "robotwin_task1": _all(["adjust_bottle"], "robotwin"),
    "robotwin_task2": _all(["place_a2b_left", "place_a2b_right"], "robotwin"),
    "multi_robot": _all(["LEROBOT_LIBERO_DATA/libero_10_no_noops_1.0.0_lerobot"], "libero_franka"),
    "real_robot_all": _all(G1_TASKS, "g1_body29_aloha_arms_only"),
    "gr1_pick_place": _all(["robot_sim.PickNPlace"], "fourier_gr1_arms_hands"),
}


def is_path(data_mix: str) -> bool:
    """Whether data_mix names files (a dataset, a folder of them, a mixture file) rather than a named mixture."""
    if data_mix in DATASET_NAMED_MIXTURES:
        return False
    return ("/" in data_mix or os.sep in data_mix or data_mix.endswith(MIXTURE_FILE_SUFFIXES)
            or Path(data_mix).expanduser().exists())


def _file_entry(item, number: int, path: Path, data_config: str) -> MixtureEntry:
    where = f"{path}, entry {number}"
    if not isinstance(item, dict) or "path" not in item:
        raise ConfigError(f"{where}: {item!r} is not a mapping with a 'path'; write '- {{path: DIR, weight: 1.0, "
                          "data_config: robotwin}'")
    unknown = sorted(set(item) - set(ENTRY_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; an entry has {list(ENTRY_KEYS)}")
    weight = item.get("weight", 1.0)
    if not isinstance(weight, Real) or isinstance(weight, bool) or not 0 < float(weight) <= MAX_WEIGHT:
        raise ConfigError(f"{where}: weight {weight!r} must be a positive number up to {MAX_WEIGHT:g} (1.0 = visited "
                          "once per epoch)")
    config = item.get("data_config") or data_config
    if config not in ("auto", *DATA_CONFIGS):
        close = difflib.get_close_matches(str(config), list(DATA_CONFIGS), n=1)
        raise ConfigError(f"{where}: data_config {config!r} is not a data config{f'; did you mean {close[0]!r}?' if close else ''} "
                          f"(known: auto, {', '.join(DATA_CONFIGS)})")
    folder = resolved((path.parent / str(item["path"])).expanduser(), f"{where}: path")
    if not is_dataset(folder):
        raise ConfigError(f"{where}: {folder} is not a LeRobot dataset folder (no meta/info.json); fix 'path' "
                          "(relative paths start at the mixture file's folder)")
    return MixtureEntry(str(folder), float(weight), str(config))


def _mixture_file(path: Path, data_config: str) -> list[MixtureEntry]:
    try:
        items = yaml.safe_load(checked_yaml_text(path, ConfigError, "mixture file", max_entries=MAX_ENTRIES))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: mixture file cannot be read ({exc}); write a YAML list of "
                          "{path, weight, data_config}") from exc
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{path}: a mixture file is a non-empty YAML list of {{path, weight, data_config}} entries")
    entries = [_file_entry(item, number, path, data_config) for number, item in enumerate(items, start=1)]
    first: dict[str, int] = {}  # dataset -> the entry number that names it first
    for number, entry in enumerate(entries, start=1):
        if entry.dataset in first:
            earlier = entries[first[entry.dataset] - 1]
            raise ConfigError(f"{path}, entries {first[entry.dataset]} and {number}: both name the dataset "
                              f"{entry.dataset}; give it once (weight {earlier.weight:g} + {entry.weight:g} = "
                              f"{earlier.weight + entry.weight:g} samples it as both do)")
        first[entry.dataset] = number
    return entries


def resolve_data_mix(data_mix: str, data_config: str = "auto") -> list[MixtureEntry]:
    """The entries of `datasets.vla_data.data_mix`: a named mixture (its own data configs), or a path whose
    datasets are read through `data_config` (a mixture file's entries may name their own)."""
    if not is_path(data_mix):
        return resolve_mixture(data_mix)
    path = resolved(Path(data_mix).expanduser(), "datasets.vla_data.data_mix")
    if path.suffix in MIXTURE_FILE_SUFFIXES and path.is_file():
        entries = _mixture_file(path, data_config)
    elif is_dataset(path):
        entries = [MixtureEntry(str(path), 1.0, data_config)]
    elif path.is_dir() and dataset_folders(path):
        entries = [MixtureEntry(str(folder), 1.0, data_config) for folder in dataset_folders(path)]
    else:
        what = "does not exist" if not path.exists() else "holds no LeRobot dataset (meta/info.json) one or two levels down"
        raise ConfigError(f"datasets.vla_data.data_mix={data_mix}: {path} {what}; give a dataset folder, a folder of "
                          "datasets, a mixture file (.yaml) or a mixture name")
    return _unique(entries)


def _unique(entries) -> list[MixtureEntry]:
    """Entries with duplicates of (dataset, data config) dropped, as the original does."""
    seen, unique = set(), []
    for entry in entries:
        if (entry.dataset, entry.data_config) not in seen:
            seen.add((entry.dataset, entry.data_config))
            unique.append(entry)
    return unique


def resolve_mixture(name: str) -> list[MixtureEntry]:
    """The entries of a named mixture, duplicates of (dataset, data config) dropped."""
    if name not in DATASET_NAMED_MIXTURES:
        valid = list(DATASET_NAMED_MIXTURES)
        ranked = difflib.get_close_matches(name, valid, n=len(valid), cutoff=0.0)
        raise ConfigError(f"datasets.vla_data.data_mix={name!r} is neither a known mixture nor an existing path; "
                          f"valid names: {', '.join(ranked)}")
    return _unique(DATASET_NAMED_MIXTURES[name])


def mixture_presence(entries: list[MixtureEntry], root: Path | None, data_mix: str) -> tuple[list[MixtureEntry], list[str], str | None]:
    """The one completeness rule (trainer and launcher preflight): datasets are folders under the data root;
    missing ones are skipped with a warning, and at least one must be there.

    Returns (present entries, missing dataset names, the problem when none is present).
    """
    found = [e for e in entries if root is not None and (Path(root) / e.dataset).is_dir()]
    missing = [e.dataset for e in entries if e not in found]
    problem = None
    if root is None:
        problem = (f"datasets.vla_data.data_root_dir is not set, but data_mix={data_mix} names folders under it; "
                   "set it, or give data_mix as a path")
    elif not found:
        problem = (f"datasets.vla_data.data_mix={data_mix}: none of its {len(entries)} datasets is under "
                   f"datasets.vla_data.data_root_dir={root} (expected folders such as {', '.join(missing[:3])}); point "
                   "data_root_dir at the folder holding them")
    return found, missing, problem
