"""Checks that catch bad data before step 1: non-finite values, empty episodes, unreadable videos.

Run while a dataset is indexed (the results are cached with the index), so the cost is paid once per
dataset version, not at every start and never hours into a run.
"""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path

import numpy as np

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.dataloader.cache import cache_file, read_cached
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.meta_schema import image_size
from DiT4DiT.dataloader.reader import DatasetLayout

log = logging.getLogger(__name__)

SKIP_HINT = "or skip such episodes with --datasets.vla_data.skip_non_finite_episodes true"


def check_not_empty(path: Path, episode: int, rows: int) -> None:
    if rows == 0:
        raise DataError(f"{path}: episode {episode} has no rows (zero-length episode); remove it from "
                        "meta/episodes.jsonl or re-record it")


# Beyond this magnitude, squares (std) and differences (min_max ranges) of float32 values overflow to inf.
LARGEST_VALUE = 1e18


def check_column_type(path: Path, episode: int, column: str, values: np.ndarray, integer: bool = False) -> None:
    """State, action and timestamp columns hold numbers; the language column integer task indices."""
    wanted = np.integer if integer else np.number
    if not np.issubdtype(values.dtype, wanted) or values.dtype == np.bool_:
        kind = "integer task indices" if integer else "numbers"
        example = values.reshape(-1)[:1].tolist()
        raise DataError(f"{path}: episode {episode}, column '{column}' holds {values.dtype} values (e.g. {example}), "
                        f"not {kind}; rewrite the column with a numeric dtype")


def check_magnitude(path: Path, episode: int, column: str, values: np.ndarray) -> None:
    """Values so large that normalising them overflows float32 to inf (e.g. 1e38 placeholders)."""
    too_large = np.abs(values) > LARGEST_VALUE
    if too_large.any():
        row, dim = (int(i) for i in np.argwhere(too_large)[0])
        raise DataError(f"{path}: episode {episode}, column '{column}', row {row} (dim {dim}) is {values[row, dim]:.3g}; "
                        f"values beyond +-{LARGEST_VALUE:.0e} overflow when normalised. Fix the recording or its units")


def check_timestamps(path: Path, episode: int, timestamps: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(timestamps.astype(np.float64)))
    if len(bad):
        raise DataError(f"{path}: episode {episode}, column 'timestamp', row {int(bad[0])} is {timestamps[bad[0]]}; "
                        "frames are found by time, so every row needs a finite time: rewrite it as frame_index / fps")


def non_finite(path: Path, episode: int, column: str, values: np.ndarray) -> str | None:
    """A message naming file, column, row and dim of the first NaN/Inf in a (rows, dims) array, or None."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    row, dim = (int(i) for i in np.argwhere(bad)[0])
    return (f"{path}: episode {episode}, column '{column}', row {row} (dim {dim}) is {values[row, dim]}; "
            f"{int(bad.sum())} non-finite value(s) in this episode. Fix the data, {SKIP_HINT}")


def report_skipped(layout: DatasetLayout, skipped: dict[int, str]) -> None:
    if skipped:
        log.warning("%s: skipped %d episode(s) with NaN/Inf values (datasets.vla_data.skip_non_finite_episodes), "
                    "e.g. %s", layout.root, len(skipped), next(iter(skipped.values())))


def check_statistics_finite(stats: dict, path: Path) -> None:
    """Statistics with a NaN or Inf are never written: every sample would be normalised with them."""
    def visit(node, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                visit(value, f"{where}.{key}" if where else str(key))
        elif isinstance(node, list):
            for position, value in enumerate(node):
                visit(value, f"{where}[{position}]")
        elif isinstance(node, float) and not math.isfinite(node):
            raise DataError(f"{path}: not written, statistic {where} is {node}; the data behind it holds NaN/Inf "
                            f"values. Fix the data, {SKIP_HINT}")

    visit(stats, "")


def _probe(path: Path, episode: int) -> dict:
    """Frame count and size from the container, and one decoded frame (a file that opens may still not decode)."""
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            frame = next(container.decode(stream), None)
            if frame is None:
                raise DataError(f"{path}: video of episode {episode} holds no decodable frame; re-encode or restore it")
            return {"frames": int(stream.frames), "height": frame.height, "width": frame.width}
    except (av.error.FFmpegError, IndexError) as exc:
        raise DataError(f"{path}: video of episode {episode} cannot be decoded ({exc or 'no video stream'}); "
                        "re-encode or restore the file") from exc


def probe_videos(layout: DatasetLayout, episodes, video_keys: list[str], lengths: dict[int, int], cache_dir: Path) -> None:
    """Every video of these episodes opens and decodes, covers its episode's rows, and has info.json's size.

    Unreadable or too short -> DataError; another resolution than info.json's -> one warning for the dataset
    naming a file (frames are resized anyway). Probes are cached by each file's name, size and mtime.
    """
    videos = [(int(e), key, layout.video_path(int(e), key)) for e in episodes for key in video_keys]
    stats = [f"{p.relative_to(layout.root)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for _, _, p in videos]
    cache = cache_file(cache_dir, layout, "videos", hashlib.sha256("\n".join(stats).encode()).hexdigest()[:32])
    probes = read_cached(cache)
    if probes is None:
        probes = {str(path.relative_to(layout.root)): _probe(path, episode) for episode, _, path in videos}
        write_json_atomic(cache, probes)
    mismatched = []
    for episode, key, path in videos:
        probe = probes[str(path.relative_to(layout.root))]
        # A container may not record its frame count (0); the decoder then finds a short video when sampling.
        if 0 < probe["frames"] < lengths[episode] - 1:
            raise DataError(f"{path}: {probe['frames']} frames for an episode of {lengths[episode]} rows (episode "
                            f"{episode}); the last steps have no frame. Re-encode the video or fix the episode")
        declared = image_size(layout.info.get("features", {}).get(key, {}))
        if declared and declared != (probe["height"], probe["width"]):
            mismatched.append((path, probe, key, declared))
    if mismatched:
        path, probe, key, declared = mismatched[0]
        log.warning("%s: %d video(s) differ from meta/info.json's size, e.g. %s: %dx%d frames, but features.%s.shape "
                    "says %dx%d (height x width); frames are resized to image_size either way, check that these are "
                    "the right videos", layout.root, len(mismatched), path, probe["height"], probe["width"], key,
                    *declared)


def check_image_columns(layout: DatasetLayout, episodes, image_keys: list[str]) -> None:
    """Cameras stored as images: every episode's parquet file has their columns (read from the schema only)."""
    import pyarrow.parquet as pq

    for path in dict.fromkeys(layout.parquet_path(int(e)) for e in episodes):
        missing = [k for k in image_keys if k not in pq.read_schema(path).names]
        if missing:
            raise DataError(f"{path}: info.json gives camera(s) {missing} dtype 'image', but the file has no such "
                            "column; restore the images or fix features.<camera>.dtype in meta/info.json")
