"""VAE latent store: the posterior of every clip a sample can draw, encoded once per store and memory-mapped.

A node store (node_store.py: keyed folder, one checksummed file per item, filled across ranks, atomic writes,
memory-mapped reads) with one file per episode of a dataset. Row t of a file is the clip of the sample at the
episode's step t (its frames at the run's video offsets, cameras combined as the run combines them, at its image
size), as clip_encoding.py encodes it: the mean of its latent frames and the conditioning frame's std, in the
VAE's dtype (ClipPosterior). Training then reads rows instead of decoding video and running the VAE, and draws the
conditioning sample from the stored mean and std with the generator it would have used.

The folder is keyed by the VAE's weights, the sample layout (image size, camera layout, frame offsets), the latent
frames kept, the dtype and the format; a file by its episode's description (dataset, episode, cameras, the size
and mtime of its video files, its length: a re-encoded video is a new file). Each row's sha256 is in the file's
metadata and is checked on every read (a few hundred KiB per row; a process reads rows many times over a run and
keeps no list of the ones it checked).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np
import torch

from DiT4DiT.facts import latent_frame_count
from DiT4DiT.model.modules.clip_encoding import ClipPosterior, clip_posterior, encoding_autocast
from DiT4DiT.model.modules.host_to_device import to_device
from DiT4DiT.model.modules.node_store import (SAFETENSORS_DTYPES, NodeStore, Ranks, StoreError, snapshot_identity,
                                              tensor_sha256)
from DiT4DiT.base_model.safetensors_header import read_header

log = logging.getLogger(__name__)

STORE_DIR_KEY = "framework.cosmos25.latent_store_dir"
CACHE_KEY = "framework.cosmos25.latent_cache"
TENSORS = ("mean", "std")
FORMAT = 1


class LatentStoreError(StoreError):
    """The latent store cannot be written or is incomplete, or a stored row changed; the message names the fix."""


class Episode(Protocol):
    """An episode whose clips the store holds (DiT4DiT/dataloader/episode_clips.py makes them)."""

    name: str  # what identifies the episode's clips (dataset, episode, cameras, video files, length)
    rows: int  # steps of the episode: one clip each

    def describe(self) -> str: ...

    def clips(self) -> Iterator[torch.Tensor]:
        """Each step's clip, (T, 3, H, W) in [0, 1], in step order."""
        ...


@dataclass(frozen=True)
class _Located:
    path: Path
    rows: int
    offsets: dict[str, int]  # tensor -> offset of its row 0 in the file
    row_shapes: dict[str, tuple[int, ...]]
    row_bytes: dict[str, int]
    digests: np.ndarray  # (rows, 32) uint8: each row's sha256 (its mean's bytes, then its std's), compact: a process
    # holds every episode's (500,000 rows for RoboTwin's 50 tasks: 16 MB, where hex strings would take 56)


@dataclass(frozen=True)
class LatentFillReport:
    episodes: int  # episodes asked for
    encoded: int  # episodes encoded in this fill, by all ranks together
    rows: int  # clips of all episodes asked for
    store_bytes: int  # size of their files
    folder: Path


class LatentStore(NodeStore["Episode | str", _Located]):
    """Episode -> one ClipPosterior row per step, stored under `root` for one VAE and one sample layout."""

    what, noun, dir_key, error = "latent store", "episode", STORE_DIR_KEY, LatentStoreError

    def __init__(self, root: str | os.PathLike, vae_identity: str, layout: dict, latent_frames: int, dtype: torch.dtype):
        super().__init__(root, {"vae": vae_identity, "layout": layout, "latent_frames": int(latent_frames),
                                "dtype": str(dtype), "format": FORMAT})
        self.latent_frames = int(latent_frames)
        self.dtype = dtype

    def name(self, episode: "Episode | str") -> str:
        return episode if isinstance(episode, str) else episode.name

    def describe(self, episode: "Episode | str") -> str:
        if isinstance(episode, str):  # a name (episode_clips.py writes it): its dataset and episode
            fields = json.loads(episode)
            return f"dataset {fields['dataset']} episode {fields['episode']}"
        return episode.describe()

    def check(self, path: Path, episode: "Episode | str") -> _Located:
        header = read_header(path)
        metadata = header.metadata
        if metadata["key"] != self.key or metadata["episode"] != self.name(episode):
            raise ValueError("its key or episode differs from the file name's")
        digests = np.array([np.frombuffer(bytes.fromhex(d), np.uint8) for d in json.loads(metadata["rows_sha256"])],
                           dtype=np.uint8).reshape(-1, 32)
        offsets: dict[str, int] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        sizes: dict[str, int] = {}
        for name in TENSORS:
            entry = header.tensors[name]
            shape: tuple[int, ...] = tuple(entry["shape"])
            begin, end = entry["data_offsets"]
            if SAFETENSORS_DTYPES[entry["dtype"]] != self.dtype or len(shape) != 5 or shape[0] != len(digests):
                raise ValueError(f"its {name} is {entry['dtype']} {list(shape)}, not {self.dtype} "
                                 f"({len(digests)}, C, T, h, w)")
            if end - begin != int(np.prod(shape)) * self.dtype.itemsize:
                raise ValueError(f"its {name} takes {end - begin} bytes, not the {list(shape)} its header says")
            offsets[name], shapes[name] = header.data_start + begin, shape[1:]
            sizes[name] = int(np.prod(shape[1:])) * self.dtype.itemsize
        if shapes["mean"][1] != self.latent_frames or shapes["std"][1] != 1:
            raise ValueError(f"it holds {shapes['mean'][1]} latent frames, not {self.latent_frames}")
        if not isinstance(episode, str) and len(digests) != episode.rows:
            raise ValueError(f"it holds {len(digests)} rows, the episode has {episode.rows} steps")
        if header.file_size != header.described_size:
            raise ValueError(f"its size {header.file_size} does not match its header")
        return _Located(path, len(digests), offsets, shapes, sizes, digests)

    def write(self, episode: Episode, posterior: ClipPosterior) -> None:
        """Publish an episode's rows ((rows, C, T, h, w) mean, (rows, C, 1, h, w) std); readers never see a partial
        file."""
        tensors = {"mean": posterior.mean.detach().to("cpu", self.dtype).contiguous(),
                   "std": posterior.std.detach().to("cpu", self.dtype).contiguous()}
        digests = [tensor_sha256([tensors["mean"][r], tensors["std"][r]]) for r in range(episode.rows)]
        self.publish(episode, tensors, {"episode": episode.name, "rows_sha256": json.dumps(digests)})

    def fill(self, episodes: list[Episode], encode: Callable[[torch.Tensor], ClipPosterior], ranks: Ranks = Ranks(),
             batch_size: int = 8) -> LatentFillReport:
        """Encode every missing episode exactly once per store; every rank calls this with the same list.
        `encode`: a (B, T, 3, H, W) batch of clips -> its ClipPosterior (on any device)."""
        by_name = {e.name: e for e in episodes}
        wanted: list[Episode | str] = [by_name[name] for name in sorted(by_name)]
        started = time.perf_counter()

        @torch.no_grad()
        def encode_share(items: list[Episode | str]) -> None:  # the store's items: `wanted`'s episodes
            share = [by_name[self.name(item)] for item in items]
            for done, episode in enumerate(share, start=1):
                parts: list[ClipPosterior] = []
                clips = episode.clips()
                while batch := [clip for _, clip in zip(range(batch_size), clips)]:
                    posterior = encode(torch.stack(batch))
                    parts.append(ClipPosterior(posterior.mean.cpu(), posterior.std.cpu()))
                self.write(episode, ClipPosterior(torch.cat([p.mean for p in parts]), torch.cat([p.std for p in parts])))
                if done == 1 or done == len(share):
                    pace = (time.perf_counter() - started) / done
                    log.info("latent store: %d of this rank's %d episodes encoded (%s); about %.0f min left at this pace",
                             done, len(share), episode.describe(), pace * (len(share) - done) / 60)

        encoded = self.fill_missing(wanted, encode_share, ranks)
        return LatentFillReport(len(wanted), encoded, sum(e.rows for e in by_name.values()),
                                self.stored_bytes(wanted), self.folder)

    def posterior(self, episode: str, row: int) -> dict[str, torch.Tensor]:
        """Row `row` of the episode named `episode`: {"mean": (C, T, h, w), "std": (C, 1, h, w)}, copied out of the
        mapping after its sha256 matched the one written with it."""
        located = self.locate(episode)
        if located is None:
            raise LatentStoreError(f"{self.folder}: the latent store holds no file for {self.describe(episode)}; it "
                                   "is filled before step 1 (or by python -m DiT4DiT.tools.latent_store): start again "
                                   "to fill it")

        def changed(reason) -> str:
            return (f"{located.path}: the latent store's row {row} of {self.describe(episode)} changed after it was "
                    f"written ({reason}); delete the file and start again (the episode is encoded anew)")

        if not 0 <= row < located.rows:
            raise LatentStoreError(changed(f"it has {located.rows} rows"))
        views = {name: self.mapped(located.path, located.offsets[name] + row * located.row_bytes[name],
                                   located.row_bytes[name], changed) for name in TENSORS}
        tensors = [torch.from_numpy(views[name]) for name in TENSORS]
        if bytes.fromhex(tensor_sha256(tensors)) != located.digests[row].tobytes():
            raise LatentStoreError(changed("its sha256 differs from the one it was written with"))
        return {name: t.view(self.dtype).view(located.row_shapes[name]).clone() for name, t in zip(TENSORS, tensors)}

def fill_latent_store(vae: torch.nn.Module, episodes: list[Episode], *, store_dir: Path, base_model: str | Path,
                      layout: dict, num_frames_out: int, temporal_factor: int, with_future: bool, ranks: Ranks,
                      batch_size: int, mixed_precision: str) -> tuple[LatentStore, LatentFillReport]:
    """The latent store of a run, filled: every episode's clips through `vae` (on its device) as a training step
    encodes them (clip_encoding.py, under the step's autocast), the encoding split across ranks. The trainer (before
    step 1) and python -m DiT4DiT.tools.latent_store both fill it here. `layout`: MixtureDataset.sample_layout();
    `with_future`: the run trains a future-video loss (framework.cosmos25.training is not action)."""
    device = next(vae.parameters()).device
    frames = latent_frame_count(num_frames_out, temporal_factor) if with_future else 1
    store = LatentStore(store_dir, snapshot_identity(base_model, ("vae",)), layout, frames, vae.dtype)

    def encode(clips: torch.Tensor) -> ClipPosterior:
        with encoding_autocast(device, mixed_precision):
            return clip_posterior(vae, to_device(clips, device), num_frames_out, temporal_factor, with_future)

    report = store.fill(episodes, encode, ranks, batch_size)
    log.info("latent store: %d episodes (%d clips), %d encoded now, %.1f MiB, at %s; training reads it instead of "
             "decoding and encoding video", report.episodes, report.rows, report.encoded, report.store_bytes / 2**20,
             report.folder)
    return store, report
