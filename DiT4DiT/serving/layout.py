"""The camera layout a run was trained with (datasets.vla_data.views), found from its run folder for serving.

Ours: config.yaml records the key as set; with `auto` (the default) dataset_statistics.json records the layout
training resolved (`views` in each embodiment's entry). The original's run folders record neither: their layout is
the one their data configs imply, as training's `auto` resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import DatasetsVlaDataSection
from DiT4DiT.dataloader.data_configs import VIEW_LAYOUTS, auto_views
from DiT4DiT.errors import DiT4DiTError


@dataclass(frozen=True)
class RunLayout:
    views: str  # side_by_side | as_frames
    source: str  # where it was read, for the start-up line


def implied_layout(vla: DatasetsVlaDataSection) -> RunLayout:
    """The layout `auto` gives the data configs of `vla.data_mix` (the ones combining several cameras)."""
    from DiT4DiT.dataloader.modality import mixture_configs

    try:
        configs = mixture_configs(vla.data_mix, vla.data_config, vla.data_root_dir)
    except DiT4DiTError as error:
        # Only runs of ours from before datasets.vla_data.views get here (ours record the layout, the original's
        # mixtures are named), and those were all trained side by side.
        return RunLayout("side_by_side", f"the default: neither config.yaml nor dataset_statistics.json records one "
                                         f"and data_mix's data configs cannot be read here ({error})")
    layouts = {config.views: config.name for config in configs if len(config.video_keys) > 1}
    views = auto_views(layouts, lambda listing: ConfigError(
        f"datasets.vla_data.data_mix={vla.data_mix} combines cameras both ways ({listing}); set "
        "datasets.vla_data.views in the run's config.yaml to the layout it trained with"))
    if not layouts:
        return RunLayout(views, f"data_mix={vla.data_mix}: no data config with several cameras")
    return RunLayout(views, f"implied by data config {layouts[views]}, as datasets.vla_data.views=auto resolves it")


def run_layout(vla: DatasetsVlaDataSection, statistics_entry: dict,
               statistics_source: str = "dataset_statistics.json") -> RunLayout:
    """The run's layout: the config's key when set, else the one its statistics record, else the implied one."""
    if vla.views != "auto":
        return RunLayout(vla.views, "config.yaml datasets.vla_data.views")
    recorded = statistics_entry.get("views")
    if recorded is None:
        return implied_layout(vla)
    if recorded not in VIEW_LAYOUTS:
        raise ConfigError(f"{statistics_source}: views={recorded!r} is not a camera layout; use one of {list(VIEW_LAYOUTS)}")
    return RunLayout(recorded, f"{statistics_source} views, as training resolved datasets.vla_data.views=auto")
