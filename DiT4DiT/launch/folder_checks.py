"""Is a data root complete enough to start training? (Standard library only; the base model's folder is
checked by DiT4DiT/base_model/pipeline_folder.py.)

Shared by the launcher's preflight and the doctor, so a missing dataset is reported in seconds, before 16
processes start. Each function returns one problem per item ([] when the folder is complete).
"""

from __future__ import annotations

import sys
from pathlib import Path

from DiT4DiT.dataloader.layout import dataset_folders, is_dataset


def data_root_problems(folder: str | Path, data_mix: str | None = None) -> list[str]:
    """What is wrong with a data root ([] when complete).

    Without `data_mix`: it must hold at least one LeRobot dataset folder. With it: the trainer's rule
    (`mixture_presence`): at least one dataset of the mixture is there, and each one there has meta/info.json
    (resolving names imports the data package, hence torch: lazy).
    """
    root = Path(folder)
    if not root.is_dir():
        return [f"{root}: data root folder does not exist"]
    if data_mix is None:
        if not dataset_folders(root):
            return [f"{root}: no dataset folder with meta/info.json inside (expected <data_root>/<dataset>/meta/info.json)"]
        return []
    from DiT4DiT.dataloader.mixtures import mixture_presence, resolve_mixture

    try:
        entries = resolve_mixture(data_mix)
    except ValueError as err:
        return [str(err)]
    found, missing, problem = mixture_presence(entries, root, data_mix)
    if problem:
        return [problem]
    if missing:
        # The trainer's rule: missing datasets are skipped (it warns too); only an empty mixture stops the run.
        print(f"note: {root}: {len(missing)} of {len(entries)} datasets of mixture '{data_mix}' are not there "
              f"(e.g. {missing[0]}); training skips them", file=sys.stderr)
    return [f"{root / e.dataset}: no meta/info.json (not a LeRobot dataset folder)" for e in found
            if not is_dataset(root / e.dataset)]


def names_files(data_mix: str) -> bool:
    """Whether data_mix is a path (a dataset, a folder of them, a mixture file) rather than a mixture name."""
    from DiT4DiT.dataloader.mixtures import is_path

    return is_path(data_mix)


def data_mix_problems(data_mix: str) -> list[str]:
    """A data_mix given as a path: the dataset folder, folder of datasets or mixture file resolves."""
    from DiT4DiT.dataloader.mixtures import resolve_data_mix

    try:
        resolve_data_mix(data_mix)
    except ValueError as err:
        return [str(err)]
    return []
