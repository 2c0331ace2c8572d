"""dataloader/images.py: camera frames stored as image cells in the parquet files (bytes, or a path)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.images import decode_image, decode_images


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 6, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_cell_decodes_from_its_bytes_or_its_path(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "f.png").write_bytes(png(9))
    assert decode_image({"bytes": png(7), "path": None}, tmp_path, "ep 0")[0, 0].tolist() == [7, 7, 7]
    assert decode_image({"bytes": None, "path": "images/f.png"}, tmp_path, "ep 0").shape == (4, 6, 3)
    cells = np.array([{"bytes": png(v), "path": None} for v in (1, 2, 3)], dtype=object)
    assert decode_images(cells, np.array([2, 0]), tmp_path, "ep 0")[:, 0, 0, 0].tolist() == [3, 1]


def test_an_empty_or_broken_cell_names_where_it_is(tmp_path):
    with pytest.raises(DataError, match="ep 3: image cell holds neither bytes nor a path"):
        decode_image({"bytes": None, "path": None}, tmp_path, "ep 3")
    cells = np.array([{"bytes": b"not an image", "path": None}], dtype=object)
    with pytest.raises(DataError, match="ep 3, row 0: image cannot be decoded"):
        decode_images(cells, np.array([0]), tmp_path, "ep 3")
