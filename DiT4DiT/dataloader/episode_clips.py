"""Every step's clip of a dataset's episodes, for the latent store: the frames a sample of that step carries,
combined the same way, from one decode of the episode per camera.

A sample decodes only its own frames; here each camera's video is decoded once for the whole episode and each
step takes its rows from it (the same frames: the decoder picks the frame nearest to a timestamp whichever others
it is asked for), then goes through the samples' own combine_views, so a stored clip is the clip the sample holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from DiT4DiT.dataloader.dataset import EpisodeSteps, FrameDecoder, combine_views


@dataclass(frozen=True)
class EpisodeClips:
    """One episode's clips, one per step (an Episode of DiT4DiT/model/modules/latent_store.py)."""

    steps: EpisodeSteps
    episode: int
    decode: FrameDecoder
    views: str  # the run's camera layout (side_by_side / as_frames)

    @property
    def name(self) -> str:
        return self.steps.episode_name(self.episode)

    @property
    def rows(self) -> int:
        return self.steps.episode_length(self.episode)

    def describe(self) -> str:
        return f"{self.steps.layout.root} episode {self.episode}"

    def clips(self) -> Iterator[torch.Tensor]:
        """Each step's (T, 3, H, W) clip in [0, 1], in step order."""
        length = self.rows
        every = self.steps.frames(self.episode, np.arange(length), self.decode)
        for t in range(length):
            rows = self.steps.frame_rows(t, length)
            yield torch.stack(combine_views([camera[rows] for camera in every], self.steps.shape.image_size, self.views))
