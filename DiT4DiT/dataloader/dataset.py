"""Samples of a dataset mixture: (seed, epoch, index) picks a dataset and a step; the step is read, normalised, padded."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from DiT4DiT.dataloader.data_configs import DataConfig
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.image_augmentation import ImageAugmentation, augment_views, draw
from DiT4DiT.dataloader.images import decode_images
from DiT4DiT.dataloader.reader import DatasetLayout, EpisodeCache, Slice
from DiT4DiT.dataloader.transforms import Normalizer

FrameDecoder = Callable[..., np.ndarray]  # (path, timestamps, *, fps, episode) -> (N, H, W, 3) uint8


@dataclass(frozen=True)
class SampleShape:
    video_offsets: tuple[int, ...]  # frame offsets from the step, already subsampled
    action_horizon: int
    image_size: int
    max_state_dim: int
    max_action_dim: int


@dataclass
class RawStep:
    state: np.ndarray  # (S,)
    action: np.ndarray  # (T_a, D)
    views: list[np.ndarray]  # per camera, side-by-side order: (T, H, W, 3) uint8
    lang: str
    action_in_episode: np.ndarray  # (T_a,) bool: false for steps past the episode's end (lerobot's action_is_pad)


def _rows(values: np.ndarray, rows: np.ndarray, absolute: bool) -> np.ndarray:
    """Rows of an episode; past its end the last row repeats (absolute values) or zeros (relative values)."""
    picked = values[np.clip(rows, 0, len(values) - 1)]
    if absolute:
        return picked
    return np.where((rows < len(values))[:, None], picked, 0.0)


class EpisodeSteps:
    """The steps of chosen episodes of one dataset folder, read through one data config."""

    def __init__(self, layout: DatasetLayout, config: DataConfig, shape: SampleShape):
        self.layout, self.config, self.shape = layout, config, shape
        self.state_slices = [layout.slice_of(k, config.name) for k in config.state_keys]
        self.action_slices = [layout.slice_of(k, config.name) for k in config.action_keys]
        self.camera_keys = [layout.video_key_of(k, config.name) for k in config.ordered_video_keys()]
        self.image_keys = [k for k in self.camera_keys if layout.camera_dtype(k) == "image"]
        self.video_keys = [k for k in self.camera_keys if k not in self.image_keys]  # mp4 files
        self.fps = {k: layout.video_fps(k) for k in self.video_keys}
        self.language_column = layout.language_column_of(config.language_key, config.name)
        columns = {s.column for s in self.state_slices + self.action_slices} | {"timestamp", self.language_column}
        self._tables = EpisodeCache(layout, sorted(columns))
        # Image cells are large: few episodes of them are kept.
        self._images = EpisodeCache(layout, self.image_keys, capacity=2) if self.image_keys else None
        self.select_episodes([], {})

    def select_episodes(self, episodes: Sequence[int], lengths: dict[int, int]) -> None:
        """Use these episodes (with their row counts) as the steps."""
        self.episodes = np.asarray(sorted(episodes), dtype=np.int64)
        self.ends = np.cumsum([lengths[e] for e in self.episodes], dtype=np.int64)
        self.lengths = {int(e): int(lengths[e]) for e in self.episodes}
        self._names: dict[int, str] = {}  # episode_name, computed once per process

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def locate(self, step: int) -> tuple[int, int]:
        """(episode index, row within the episode) of a step."""
        position = int(np.searchsorted(self.ends, step, side="right"))
        start = int(self.ends[position - 1]) if position else 0
        return int(self.episodes[position]), step - start

    def missing_videos(self) -> list[Path]:
        return [self.layout.video_path(e, key) for e in self.episodes for key in self.video_keys
                if not self.layout.video_path(e, key).is_file()]

    def read(self, step: int, decode: FrameDecoder, frames: bool = True) -> RawStep:
        """The step's state, action chunk, instruction and (`frames`) its cameras' frames."""
        episode, t = self.locate(step)
        table = self._tables.get(episode)
        length = len(table["timestamp"])
        state = np.concatenate([table[s.column][t, s.start:s.end] for s in self.state_slices])
        rows: np.ndarray = t + np.arange(self.shape.action_horizon)
        action = np.concatenate([_rows(table[s.column][:, s.start:s.end], rows, s.absolute)
                                 for s in self.action_slices], axis=1)
        views = self.frames(episode, self.frame_rows(t, length), decode) if frames else []
        task = int(table[self.language_column][t])
        if task not in self.layout.tasks:
            raise DataError(f"{self.layout.parquet_path(episode)}: episode {episode}, frame {t}: task index {task} is "
                            f"not in {self.layout.meta_path('tasks.jsonl')}; add it there")
        return RawStep(state=state, action=action, views=views, lang=self.layout.tasks[task],
                       action_in_episode=rows < length)

    def frame_rows(self, t: int, length: int) -> np.ndarray:
        """The episode rows of step t's frames; frames past the episode's ends repeat its first / last frame."""
        return np.clip(t + np.asarray(self.shape.video_offsets), 0, length - 1)

    def frames(self, episode: int, rows: np.ndarray, decode: FrameDecoder) -> list[np.ndarray]:
        """The frames at `rows` of the episode, per camera in side-by-side order: (len(rows), H, W, 3) uint8."""
        table = self._tables.get(episode)
        timestamps = np.asarray(table["timestamp"], dtype=np.float64)[rows]
        images = self._images.get(episode) if self._images else {}
        where = f"{self.layout.parquet_path(episode)}: episode {episode}"
        return [decode_images(images[key], rows, self.layout.root, f"{where}, column '{key}'") if key in images
                else decode(self.layout.video_path(episode, key), timestamps + self.layout.video_start(episode, key),
                            fps=self.fps[key], episode=episode) for key in self.camera_keys]

    def episode_length(self, episode: int) -> int:
        return self.lengths[episode]

    def episode_name(self, episode: int) -> str:
        """What identifies an episode's clips in the latent store: the dataset, the episode and its length, the
        cameras in order, and the size and mtime of the files its frames come from (a re-encoded video is new)."""
        name = self._names.get(episode)
        if name is None:
            files = sorted({self.layout.video_path(episode, key) for key in self.video_keys}
                           | ({self.layout.parquet_path(episode)} if self.image_keys else set()))
            try:
                stats = [[str(f.relative_to(self.layout.root)), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
            except FileNotFoundError as error:  # gone since the dataset was read (a latent store fills for hours)
                raise DataError(f"{error.filename}: file of episode {episode} is missing; restore it (the dataset "
                                "held it when it was read)") from None
            name = json.dumps({"dataset": self.layout.name, "episode": episode, "rows": self.lengths[episode],
                               "cameras": self.camera_keys, "files": stats}, sort_keys=True)
            self._names[episode] = name
        return name

    def slices(self) -> dict[str, Slice]:
        keys = self.config.state_keys + self.config.action_keys
        return dict(zip(keys, self.state_slices + self.action_slices))


def combine_views(views: Sequence[np.ndarray], size: int, layout: str = "side_by_side") -> list[torch.Tensor]:
    """Every view resized to size x size (bilinear, as the original), then per frame concatenated along the width
    (`side_by_side`: T frames of size x size*V) or each view's frames after the previous view's (`as_frames`:
    V*T frames of size x size, the original's layout for two non-wrist cameras).

    The resize runs on uint8 (twice as fast as on float): rounding to 1/255 is finer than the bf16 the
    backbone reads the frames in (2^-8 near 0.5), so the model sees the same values.
    """
    frames = len(views[0])
    if layout == "as_frames":
        out = torch.empty((len(views) * frames, 3, size, size), dtype=torch.float32)
    else:
        out = torch.empty((frames, 3, size, size * len(views)), dtype=torch.float32)
    for position, pixels in enumerate(views):
        # (T, H, W, 3) seen as channels-last (T, 3, H, W): resizing reads it without a transposing copy.
        x = torch.from_numpy(np.ascontiguousarray(pixels)).permute(0, 3, 1, 2)
        if tuple(x.shape[-2:]) != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=False)
        if layout == "as_frames":
            out[position * frames:(position + 1) * frames] = x
        else:
            out[..., position * size:(position + 1) * size] = x
    return list(out.div_(255.0).unbind(0))


def _padded(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    # float32, not the original's float16: normalised values lose nothing, and the model casts them anyway.
    out = np.zeros((values.shape[0], width), dtype=np.float32)
    out[:, : values.shape[1]] = values
    mask = np.zeros((values.shape[0], width), dtype=np.bool_)
    mask[:, : values.shape[1]] = True
    return out, mask


class MixtureDataset(torch.utils.data.Dataset):
    """Example dicts (UPSTREAM_SPEC §4.1) drawn from weighted datasets; item i depends only on (seed, epoch, i)."""

    def __init__(self, parts: Sequence[EpisodeSteps], weights: Sequence[float],
                 normalizers: dict[str, tuple[Normalizer, Normalizer]], statistics: dict, instructions: Sequence[str],
                 shape: SampleShape, seed: int, decode: FrameDecoder, views: str = "side_by_side",
                 mask_padded_actions: bool = False, augmentations: Sequence[ImageAugmentation | None] | None = None,
                 training: bool = True):
        self.parts = list(parts)
        raw = np.asarray(weights, dtype=np.float64)
        self.weights = raw / raw.sum()
        # As the original: the length lets every weight-1.0 ("primary") dataset be visited once per epoch on average.
        primary = [i for i, w in enumerate(raw) if w == 1.0] or list(range(len(raw)))
        self._length = int(round(max(len(self.parts[i]) / self.weights[i] for i in primary)))
        self.normalizers = normalizers
        self._statistics = statistics
        self._instructions = sorted(set(instructions))
        self.shape, self.seed, self.epoch = shape, int(seed), 0
        self.frame_decoder = decode  # replaceable, e.g. by a benchmark's baseline decoder
        self.views, self.mask_padded_actions = views, mask_padded_actions
        self.latents = None  # the latent store the samples read their clips' posteriors from, once filled
        # Per dataset: its image augmentation (image_augmentation.py), drawn per sample in training, the evaluation
        # transform otherwise (the held-out split).
        self.augmentations = list(augmentations or [None] * len(self.parts))
        self.training = training

    def __len__(self) -> int:
        return self._length

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def instructions(self) -> list[str]:
        return list(self._instructions)

    def statistics(self) -> dict:
        return copy.deepcopy(self._statistics)

    def sample_layout(self) -> dict:
        """What shapes a sample's clip: the image size, the camera layout, the frame offsets (the latent store's key)."""
        return {"image_size": self.shape.image_size, "views": self.views, "video_offsets": list(self.shape.video_offsets)}

    def latent_episodes(self) -> list:
        """Every episode of the mixture as the latent store encodes it (EpisodeClips)."""
        from DiT4DiT.dataloader.episode_clips import EpisodeClips

        return [EpisodeClips(part, int(e), self.frame_decoder, self.views) for part in self.parts for e in part.episodes]

    def use_latents(self, store) -> None:
        """From now on samples carry `latents` ({"mean", "std"}: their clip's posterior, from `store`, a filled
        LatentStore) in place of `image`, and no video is decoded."""
        augmented = [part for part, a in zip(self.parts, self.augmentations) if a is not None]
        if augmented:
            raise DataError(f"framework.cosmos25.latent_cache: {augmented[0].layout.root} is read through data config "
                            f"'{augmented[0].config.name}', whose frames are augmented (a stored posterior would be the "
                            "same every epoch); set datasets.vla_data.image_augmentation.apply=none to train it without "
                            "augmentation, or framework.cosmos25.latent_cache=false")
        self.latents = store

    def _generators(self, index: int) -> tuple[np.random.Generator, np.random.Generator]:
        """Item `index`'s two generators, seeded by a hash of (seed, epoch, index): one picks its step, the other
        draws its image augmentation."""
        digest = hashlib.sha256(f"{self.seed}:{self.epoch}:{index}".encode()).digest()
        step, augmentation = (np.random.default_rng(int.from_bytes(digest[at:at + 8], "little")) for at in (0, 8))
        return step, augmentation

    def choose(self, index: int) -> tuple[int, int]:
        """(dataset position, step) of item `index`, from its own generator (a hash of (seed, epoch, index))."""
        rng = self._generators(index)[0]
        part = int(rng.choice(len(self.parts), p=self.weights))
        return part, int(rng.integers(len(self.parts[part])))

    def _views(self, index: int, position: int, views: list[np.ndarray]) -> list[torch.Tensor]:
        """A sample's frames: its cameras augmented as its dataset's augmentation says, then combined."""
        augmentation = self.augmentations[position]
        if augmentation is not None:
            chosen = draw(augmentation, self._generators(index)[1]) if self.training else None
            views = augment_views(views, augmentation, self.shape.image_size, chosen)
        return combine_views(views, self.shape.image_size, self.views)

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self._length:
            raise IndexError(f"index {index} out of range for a dataset of {self._length} samples")
        position, step = self.choose(index)
        part = self.parts[position]
        raw = part.read(step, self.frame_decoder, frames=self.latents is None)
        state_norm, action_norm = self.normalizers[part.config.embodiment_tag]
        state, state_mask = _padded(state_norm.normalize(raw.state)[None, :], self.shape.max_state_dim)
        action, action_mask = _padded(action_norm.normalize(raw.action), self.shape.max_action_dim)
        if self.mask_padded_actions:
            action_mask &= raw.action_in_episode[:, None]
        example = {"lang": raw.lang, "action": action, "action_mask": action_mask, "state": state,
                   "state_mask": state_mask}
        if self.latents is None:
            return {"image": self._views(index, position, raw.views), **example}
        episode, t = part.locate(step)
        return {"latents": self.latents.posterior(part.episode_name(episode), t), **example}


def collate_fn(examples: list[dict]) -> list[dict]:
    """The original's identity collate: the model takes the list of example dicts."""
    return examples
