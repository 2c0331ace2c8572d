"""The one start-up line per dataset: what was found and which choices were made for it."""

from __future__ import annotations

from DiT4DiT.dataloader.dataset import EpisodeSteps
from DiT4DiT.dataloader.image_augmentation import ImageAugmentation
from DiT4DiT.dataloader.index import DatasetIndex
from DiT4DiT.dataloader.meta_schema import image_size

VERSION_NAMES = {"v2": "v2.x", "v3": "v3.0"}


def _cameras(steps: EpisodeSteps) -> str:
    parts = []
    for key in steps.camera_keys:
        size = image_size(steps.layout.info.get("features", {}).get(key, {}))
        shown = f"{size[0]}x{size[1]}" if size else "size unknown"
        parts.append(f"{key.removeprefix('observation.images.')} {shown} {steps.layout.camera_dtype(key)}")
    return ", ".join(parts)


def augmentation_words(augmentation: ImageAugmentation | None) -> str:
    if augmentation is None:
        return "no image augmentation"
    a = augmentation
    return (f"image augmentation crop {a.crop_scale:g} (random in training, centred at evaluation), resize, colour "
            f"jitter brightness {a.brightness:g} contrast {a.contrast:g} saturation {a.saturation:g} hue {a.hue:g} "
            "(training only)")


def dataset_line(steps: EpisodeSteps, index: DatasetIndex, *, holdout: int, views: str, modality: str,
                 statistics: str, augmentation: ImageAugmentation | None = None) -> str:
    layout = steps.layout
    version = str(layout.info.get("codebase_version") or VERSION_NAMES[layout.version])
    held = (f"{holdout} held out for the eval action MSE: datasets.vla_data.holdout_episodes={holdout}, 0 trains on "
            "every episode as the original does" if holdout else "none held out: every episode trains")
    if statistics == "dataset":
        stats = "statistics from its meta/stats.json"
    else:
        ignored = (" (its meta/stats.json is not used; datasets.vla_data.statistics=dataset uses it)"
                   if layout.meta_path("stats.json").is_file() else "")
        stats = f"statistics computed over {index.num_transitions} rows{ignored}"
    skipped = f", {len(index.skipped)} skipped for NaN/Inf" if index.skipped else ""
    return (f"dataset {layout.root}: LeRobot {version}, {len(index.lengths)} episodes ({held}{skipped}), "
            f"{index.num_transitions} frames, data config {steps.config.name}, cameras {_cameras(steps)} combined "
            f"{views}, {augmentation_words(augmentation)}, modality {modality}, {stats}")
