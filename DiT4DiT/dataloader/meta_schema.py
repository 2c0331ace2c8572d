"""Field-by-field checks of meta/info.json and meta/modality.json, so a bad value is a one-line DataError naming
the file, the field and the fix, found while the folder is opened (before step 1), never a traceback later."""

from __future__ import annotations

from numbers import Integral, Real
from pathlib import Path
from typing import TypeGuard

from DiT4DiT.dataloader.errors import DataError

CAMERA_DTYPES = ("video", "image")


def _is_int(value) -> TypeGuard[Integral]:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_info(info, path: Path) -> dict:
    """info.json must be an object with a usable layout: template strings, positive fps and chunks_size,
    features with a dtype and a shape of positive integers. Returns it."""
    if not isinstance(info, dict):
        raise DataError(f"{path}: holds a {type(info).__name__}, not an object; LeRobot writes one JSON object "
                        "(codebase_version, fps, chunks_size, data_path, features); regenerate it")
    for key in ("data_path", "chunks_size"):
        if key not in info:
            raise DataError(f"{path}: key '{key}' is missing; LeRobot info.json files define it")
    if not isinstance(info["data_path"], str) or not info["data_path"]:
        raise DataError(f"{path}: 'data_path' is {info['data_path']!r}; it must be the parquet path template "
                        "(e.g. data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet)")
    if info.get("video_path") is not None and not isinstance(info["video_path"], str):
        raise DataError(f"{path}: 'video_path' is {info['video_path']!r}; give the mp4 path template or null")
    if not _is_int(info["chunks_size"]) or info["chunks_size"] <= 0:
        raise DataError(f"{path}: 'chunks_size' is {info['chunks_size']!r}; it must be a positive integer "
                        "(LeRobot's default is 1000)")
    if "fps" in info and (not _is_number(info["fps"]) or not info["fps"] > 0):
        raise DataError(f"{path}: 'fps' is {info['fps']!r}; it must be a positive number (frames per second)")
    if "codebase_version" in info and not isinstance(info["codebase_version"], str):
        raise DataError(f"{path}: 'codebase_version' is {info['codebase_version']!r}; write it as a string "
                        "such as \"v2.1\" or \"v3.0\"")
    features = info.get("features", {})
    if not isinstance(features, dict):
        raise DataError(f"{path}: 'features' is a {type(features).__name__}; it must map column names to "
                        "{dtype, shape, names}")
    for name, feature in features.items():
        where = f"{path}: features.{name}"
        if not isinstance(feature, dict) or not isinstance(feature.get("dtype"), str):
            raise DataError(f"{where} needs a 'dtype' string (float32, int64, video, image, ...)")
        shape = feature.get("shape")
        if not isinstance(shape, list) or not shape or not all(_is_int(s) and int(s) > 0 for s in shape):
            raise DataError(f"{where}.shape is {shape!r}; it must be a list of positive integers, e.g. [14]")
        fps = (feature.get("info") or feature.get("video_info") or {}).get("video.fps")
        if feature["dtype"] == "video" and fps is not None and (not _is_number(fps) or not fps > 0):
            raise DataError(f"{where}.info['video.fps'] is {fps!r}; it must be a positive number")
    return info


def image_size(feature: dict) -> tuple[int, int] | None:
    """(height, width) of a camera feature, from its `names` when given, else from the shape: channel-first
    (3, H, W) and channel-last (H, W, 3) shapes are both understood."""
    shape = feature.get("shape") or []
    if len(shape) != 3:
        return None
    names = feature.get("names")
    if isinstance(names, list) and "height" in names and "width" in names:
        return int(shape[names.index("height")]), int(shape[names.index("width")])
    if shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4):
        return int(shape[1]), int(shape[2])
    return int(shape[0]), int(shape[1])


def check_modality(modality, path: Path) -> dict:
    """modality.json: an object of groups; state/action entries with integer start < end. Returns it."""
    if not isinstance(modality, dict):
        raise DataError(f"{path}: holds a {type(modality).__name__}, not an object of state/action/video/annotation "
                        "sections; regenerate it (python -m DiT4DiT.tools.modality DIR --data_config NAME)")
    for group, entries in modality.items():
        if not isinstance(entries, dict):
            raise DataError(f"{path}: section '{group}' is a {type(entries).__name__}; it must map key names to entries")
        for key, entry in entries.items():
            if not isinstance(entry, dict):
                raise DataError(f"{path}: '{group}.{key}' is {entry!r}; it must be an object")
            if "original_key" in entry and not isinstance(entry["original_key"], str):
                raise DataError(f"{path}: '{group}.{key}'.original_key is {entry['original_key']!r}; give a column name")
            if group not in ("state", "action"):
                continue
            start, end = entry.get("start"), entry.get("end")
            if not _is_int(start) or not _is_int(end):
                raise DataError(f"{path}: '{group}.{key}' has start={start!r}, end={end!r}; both must be integers "
                                "(write 0, not \"0\")")
            if not 0 <= int(start) < int(end):
                raise DataError(f"{path}: '{group}.{key}' reads [{start}:{end}], an empty or reversed range; "
                                "start must be >= 0 and below end")
    return modality
