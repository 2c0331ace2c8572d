"""From the data config section to datasets: find the mixture's folders, index them, merge statistics."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from DiT4DiT.config.sections import DatasetsVlaDataSection
from DiT4DiT.dataloader import checks
from DiT4DiT.config.paths import cache_root
from DiT4DiT.dataloader.data_configs import DataConfig, auto_views
from DiT4DiT.dataloader.dataset import EpisodeSteps, MixtureDataset, SampleShape
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.image_augmentation import augmentation_of
from DiT4DiT.dataloader.index import DatasetIndex, check_widths, load_index
from DiT4DiT.dataloader.mixtures import MixtureEntry, is_path, mixture_presence, resolve_data_mix
from DiT4DiT.dataloader.modality import attach_modality, choose_config
from DiT4DiT.dataloader.reader import DatasetLayout
from DiT4DiT.dataloader.statistics import (concat_statistics, merge_statistics, slice_statistics, statistics_section,
                                           stored_statistics)
from DiT4DiT.dataloader.summary import dataset_line
from DiT4DiT.dataloader.transforms import Normalizer, encoded_width
from DiT4DiT.dataloader.video import frame_decoder

log = logging.getLogger(__name__)

SPLITS = ("train", "eval")


def sample_shape(vla: DatasetsVlaDataSection, action_horizon: int) -> SampleShape:
    return SampleShape(
        video_offsets=vla.frame_offsets,
        action_horizon=action_horizon,
        image_size=vla.image_size,
        max_state_dim=vla.max_state_dim,
        max_action_dim=vla.max_action_dim,
    )


def _check_horizon(layout: DatasetLayout, config: DataConfig, shape: SampleShape) -> None:
    # Named mixtures and named data configs are checked when the config loads; this catches `auto`'s choice.
    if config.action_horizon is not None and config.action_horizon != shape.action_horizon:
        raise DataError(f"{layout.root}: data config '{config.name}' fixes the action chunk at {config.action_horizon} "
                        f"steps, but the run's chunk is {shape.action_horizon}; set datasets.vla_data.data_config to "
                        "a data config whose chunk follows framework.action_model.future_action_window_size")


def _present(entries: list[MixtureEntry], root: Path | None, data_mix: str) -> tuple[list[MixtureEntry], Path]:
    """The entries whose folders are under `root`, and `root` (an unset root is a problem)."""
    found, missing, problem = mixture_presence(entries, root, data_mix)
    if problem is not None or root is None:
        raise DataError(f"{problem} (python -m DiT4DiT.tools.tiny_dataset --data_mix NAME writes tiny ones)")
    if missing:
        log.warning("data_mix %s: found %d of %d datasets under %s; skipping %d missing (e.g. %s)", data_mix,
                    len(found), len(entries), root, len(missing), ", ".join(missing[:3]))
    return found, root


def _check_widths_fit(config: DataConfig, steps: EpisodeSteps, shape: SampleShape) -> None:
    for group, slices, limit in (("state", steps.state_slices, shape.max_state_dim),
                                 ("action", steps.action_slices, shape.max_action_dim)):
        keys = config.state_keys if group == "state" else config.action_keys
        width = encoded_width(_modes(config, keys, slices))  # sin/cos state keys take two dims each
        if width > limit:
            raise DataError(f"{steps.layout.root}: data config '{config.name}' gives {width}-dim {group}s, more than "
                            f"datasets.vla_data.max_{group}_dim={limit}; set it to at least {width}")


def _split_episodes(layout: DatasetLayout, holdout: int, split: str) -> list[int]:
    episodes = sorted(layout.episodes)
    if holdout == 0:
        return episodes
    if holdout >= len(episodes):
        raise DataError(f"{layout.root}: datasets.vla_data.holdout_episodes={holdout} leaves no training episode "
                        f"({len(episodes)} episodes); lower it (0 evaluates on training episodes)")
    return episodes[-holdout:] if split == "eval" else episodes[:-holdout]


def _key_statistics(index: DatasetIndex, slices) -> dict[str, np.ndarray]:
    return concat_statistics([slice_statistics(index.statistics[s.column], s.start, s.end) for s in slices])


def _modes(config: DataConfig, keys, slices) -> list[str]:
    return [config.normalization[k] for k, s in zip(keys, slices) for _ in range(s.width)]


def _tag_statistics(members: list[tuple[EpisodeSteps, DatasetIndex]]) -> tuple[dict, tuple[Normalizer, Normalizer]]:
    """Statistics of the datasets sharing one embodiment tag, merged, and the normalisers they imply."""
    first = members[0][0]
    config = first.config
    state_modes = _modes(config, config.state_keys, first.state_slices)
    action_modes = _modes(config, config.action_keys, first.action_slices)
    states, actions = [], []
    for steps, index in members:
        if (_modes(steps.config, steps.config.state_keys, steps.state_slices) != state_modes
                or _modes(steps.config, steps.config.action_keys, steps.action_slices) != action_modes):
            raise DataError(f"{steps.layout.root} and {first.layout.root} share embodiment tag "
                            f"'{config.embodiment_tag}' but their state/action keys, widths or normalisation differ; "
                            "give them different data configs or make their modality.json agree")
        count = index.num_transitions
        states.append((_key_statistics(index, steps.state_slices), count))
        actions.append((_key_statistics(index, steps.action_slices), count))
    state, action = merge_statistics(states), merge_statistics(actions)
    binary = config.binary_keys()
    mask = [k not in binary for k, s in zip(config.action_keys, first.action_slices) for _ in range(s.width)]
    entry = {
        "action": statistics_section(action, action_modes, mask, [s.width for s in first.action_slices]),
        "state": statistics_section(state, state_modes, key_widths=[s.width for s in first.state_slices]),
        "num_transitions": int(sum(index.num_transitions for _, index in members)),
        "num_trajectories": int(sum(len(index.lengths) for _, index in members)),
    }
    return entry, (Normalizer(state_modes, state, [s.width for s in first.state_slices]),
                   Normalizer(action_modes, action, [s.width for s in first.action_slices]))


def _views(vla: DatasetsVlaDataSection, indexed: list[tuple[EpisodeSteps, DatasetIndex]]) -> str:
    """The camera layout of the run: datasets.vla_data.views, or (auto) the one of the mixture's data configs."""
    if vla.views != "auto":
        return vla.views
    several = {s.config.views: f"{s.layout.name} ({s.config.name})" for s, _ in indexed if len(s.camera_keys) > 1}
    return auto_views(several, lambda listing: DataError(f"datasets of data_mix combine cameras differently ({listing})"
                                                         "; set datasets.vla_data.views to side_by_side or as_frames"))


def _index(layout: DatasetLayout, steps: EpisodeSteps, vla: DatasetsVlaDataSection, cache_dir: Path) -> DatasetIndex:
    numeric = sorted({s.column for s in steps.slices().values()})
    index = load_index(layout, numeric, steps.language_column, cache_dir, vla.skip_non_finite_episodes)
    if vla.statistics == "dataset":
        widths = {c: index.widths[c] for c in numeric}
        index = replace(index, statistics=stored_statistics(layout.meta_path("stats.json"), widths))
    return index


def build_vla_datasets(vla: DatasetsVlaDataSection, action_horizon: int, seed: int,
                       splits=SPLITS) -> dict[str, MixtureDataset]:
    """The datasets of `vla.data_mix`, one per split ("eval" = the held-out episodes), from one pass over its
    folders: each dataset is indexed once and the statistics are merged once. `action_horizon` is the run's action
    chunk (framework.action_model.future_action_window_size + 1); `seed` fixes the sample order."""
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"split={unknown[0]!r}: use one of {list(SPLITS)}")
    shape = sample_shape(vla, action_horizon)
    decode = frame_decoder(vla.video_backend)
    entries = resolve_data_mix(vla.data_mix, vla.data_config)
    # Named mixtures live under data_root_dir; a path data_mix gives absolute folders (root / absolute = absolute).
    root = Path(vla.data_root_dir).expanduser() if vla.data_root_dir else None
    if is_path(vla.data_mix):
        root = Path("/")
    cache_dir = cache_root(vla.cache_dir)
    weights, indexed, sources = [], [], []
    present, root = _present(entries, root, vla.data_mix)
    for entry in present:
        layout = DatasetLayout(root / entry.dataset)
        config = choose_config(layout, entry.data_config)
        _check_horizon(layout, config, shape)
        sources.append(attach_modality(layout, config, cache_dir))
        steps = EpisodeSteps(layout, config, shape)
        index = _index(layout, steps, vla, cache_dir)
        checks.report_skipped(layout, index.skipped)
        check_widths(layout, index, steps.slices())
        _check_widths_fit(config, steps, shape)
        # Every usable episode's videos (both splits) exist and decode, before step 1.
        steps.select_episodes([e for e in sorted(layout.episodes) if e in index.lengths], index.lengths)
        missing = steps.missing_videos()
        if missing:
            raise DataError(f"{layout.root}: {len(missing)} video file(s) missing, e.g. {missing[0]}; restore them "
                            "(info.json video_path names them) or remove their episodes from meta/episodes.jsonl")
        checks.probe_videos(layout, steps.episodes, steps.video_keys, index.lengths, cache_dir)
        checks.check_image_columns(layout, steps.episodes, steps.image_keys)
        weights.append(entry.weight)
        indexed.append((steps, index))
    views = _views(vla, indexed)
    augmentations = [augmentation_of(steps.config.augmentation, vla.image_augmentation) for steps, _ in indexed]
    for (steps, index), source, augmentation in zip(indexed, sources, augmentations):
        log.info(dataset_line(steps, index, holdout=vla.holdout_episodes, views=views, modality=source,
                              statistics=vla.statistics, augmentation=augmentation))
    statistics, normalizers = {}, {}
    for tag in dict.fromkeys(steps.config.embodiment_tag for steps, _ in indexed):
        statistics[tag], normalizers[tag] = _tag_statistics([m for m in indexed if m[0].config.embodiment_tag == tag])
        statistics[tag]["views"] = views
    instructions = [steps.layout.tasks[t] for steps, index in indexed for tasks in index.episode_tasks.values()
                    for t in tasks]
    datasets = {}
    for split in splits:
        parts = [_split_steps(steps, index, shape, vla.holdout_episodes, split) for steps, index in indexed]
        datasets[split] = MixtureDataset(parts, weights, normalizers, statistics, instructions, shape, seed, decode,
                                         views=views, mask_padded_actions=vla.mask_padded_actions,
                                         augmentations=augmentations, training=split == "train")
    return datasets


def _split_steps(steps: EpisodeSteps, index: DatasetIndex, shape: SampleShape, holdout: int, split: str) -> EpisodeSteps:
    layout = steps.layout
    selected = EpisodeSteps(layout, steps.config, shape)
    # Episodes left out for non-finite values (trainer option) have no length in the index.
    kept = [e for e in _split_episodes(layout, holdout, split) if e in index.lengths]
    selected.select_episodes(kept, index.lengths)
    return selected


def build_vla_dataset(vla: DatasetsVlaDataSection, action_horizon: int, seed: int,
                      split: str = "train") -> MixtureDataset:
    """The mixture dataset named by `datasets.vla_data.data_mix`; `split="eval"` gives the held-out episodes."""
    return build_vla_datasets(vla, action_horizon, seed, (split,))[split]
