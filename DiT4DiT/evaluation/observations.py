"""Simulator observations -> the request fields a served model takes (views, state), from the server's metadata."""

from __future__ import annotations

import numpy as np
from PIL import Image

from DiT4DiT.dataloader.transforms import Normalizer


def resized_views(views, size: int) -> list[np.ndarray]:
    """Each camera view as (size, size, 3) uint8, area-resized (as the original's clients resize)."""
    return [np.asarray(Image.fromarray(np.asarray(view, dtype=np.uint8)).resize((size, size), Image.BOX))
            for view in views]


def camera_fields(views, metadata: dict) -> dict:
    """An example's camera field for the served run, from the server's metadata: the views (in the data config's
    camera order) area-resized to `image_size`, then for a run trained side_by_side (or a server that names no
    layout, as the original's) one wide frame `{"image": [frame]}`, the original's request form; for an as_frames
    run the views one by one, `{"views": [...]}`, which the server combines as training did."""
    resized = resized_views(views, int(metadata["image_size"]))
    if metadata.get("views", "side_by_side") == "as_frames":
        return {"views": resized}
    return {"image": [np.concatenate(resized, axis=1)]}


class StateEncoder:
    """Raw robot state -> (1, state_dim) float32 as in training: normalised with the run's statistics, zero-padded."""

    def __init__(self, metadata: dict):
        section = metadata["statistics"]["state"]
        self.normalizer = Normalizer.from_statistics(section)
        self.width = len(section["normalization"])
        self.state_dim = int(metadata["state_dim"])

    def __call__(self, raw) -> np.ndarray:
        raw = np.asarray(raw, dtype=np.float64).reshape(-1)
        if raw.size != self.width:
            raise ValueError(f"the robot state has {raw.size} values but the run's statistics describe {self.width}; "
                             "send the state keys the model was trained on, in the data config's order")
        encoded = self.normalizer.normalize(raw)  # sin/cos keys encode one raw value as two
        out = np.zeros((1, self.state_dim), dtype=np.float32)
        out[0, : encoded.size] = encoded
        return out
