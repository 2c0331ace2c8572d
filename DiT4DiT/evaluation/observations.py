"""Simulator observations -> the request fields a served model takes (views, state), from the server's metadata."""

from __future__ import annotations

import numpy as np
from PIL import Image

from DiT4DiT.dataloader import transforms


def resized_views(views, size: int) -> list[np.ndarray]:
    """Each camera view as (size, size, 3) uint8, area-resized (as the original's clients resize)."""
    return [np.asarray(Image.fromarray(np.asarray(view, dtype=np.uint8)).resize((size, size), Image.Resampling.BOX))
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


class StateEncoder(transforms.StateEncoder):
    """Raw robot state -> (1, state_dim) float32 as in training, from the server's metadata (its statistics and
    state width); the server does the same for an example sent with "state_units": "robot"."""

    def __init__(self, metadata: dict):
        super().__init__(metadata["statistics"]["state"], int(metadata["state_dim"]))
