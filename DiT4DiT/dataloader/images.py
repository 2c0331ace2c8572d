"""Frames of cameras stored as images in the parquet files (LeRobot `dtype: image`, datasets recorded without
videos): each cell is {bytes, path} with PNG/JPEG bytes, or only a path relative to the dataset folder."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from DiT4DiT.dataloader.errors import DataError


def decode_image(cell, root: Path, where: str) -> np.ndarray:
    """(H, W, 3) uint8 RGB of one image cell."""
    from PIL import Image, UnidentifiedImageError

    data = cell.get("bytes") if isinstance(cell, dict) else None
    source = io.BytesIO(data) if data else None
    if source is None and isinstance(cell, dict) and cell.get("path"):
        source = root / cell["path"]
    if source is None:
        raise DataError(f"{where}: image cell holds neither bytes nor a path ({type(cell).__name__}); re-record it")
    try:
        with Image.open(source) as image:
            return np.asarray(image.convert("RGB"))
    except (OSError, UnidentifiedImageError) as exc:
        raise DataError(f"{where}: image cannot be decoded ({exc}); restore the file or re-record the episode") from exc


def decode_images(cells: np.ndarray, rows: np.ndarray, root: Path, where: str) -> np.ndarray:
    """(N, H, W, 3) uint8 frames of the given rows of an image column."""
    return np.stack([decode_image(cells[int(r)], root, f"{where}, row {int(r)}") for r in rows])
