"""A node-shared store of frozen-module outputs: one checksummed safetensors file per item, written once and
memory-mapped by every process that reads it.

The prompt store (text-encoder embeddings, prompt_store.py) and the latent store (VAE posteriors, latent_store.py)
are two kinds of it. What they share lives here:
- the folder is named after the key every item shares (the frozen module's identity, the shapes, the format), so a
  changed snapshot or setting never serves a stale file;
- each file's name is a hash of its item, its metadata repeats the key and the item, and a file whose header does
  not match is warned about and produced again;
- the items missing from the store are split across ranks (all ranks, then a node's ranks, for a node-local store)
  and each file is written atomically (temporary file + rename), so readers never see a partial file;
- readers map the files (copy-on-write), so a node's page cache holds one copy for all its processes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import numpy as np
import torch

from DiT4DiT.atomic_files import write_bytes_atomic
from DiT4DiT.config.schema import ConfigError
from DiT4DiT.base_model.safetensors_header import raw_header

log = logging.getLogger(__name__)

SUFFIX = ".safetensors"
IDENTITY_SAMPLE_BYTES = 1 << 20
SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


class _InFile(Protocol):
    """What every kind of store's located item says: the file it is in."""

    @property
    def path(self) -> Path: ...


Item = TypeVar("Item")
Located = TypeVar("Located", bound=_InFile)


class StoreError(ConfigError):
    """A store cannot be written or is incomplete; the message names the key or file to fix."""


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the training processes, and a collective sum over all of them.

    `all_sum` is called by every rank at the same points, so it doubles as a barrier.
    """

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    all_sum: Callable[[int], int] = int

    @classmethod
    def from_accelerator(cls, accelerator, all_sum: Callable[[int], int]) -> "Ranks":
        """The accelerator's ranks; `all_sum` sums over them on the host (training/host_waits.py): a rank may be
        encoding or writing its share of a store for longer than a device collective waits."""
        world = accelerator.num_processes
        return cls(
            rank=accelerator.process_index,
            world=world,
            local_rank=accelerator.local_process_index,
            local_world=int(os.environ.get("LOCAL_WORLD_SIZE", world)),
            all_sum=all_sum,
        )


def _hash_file(digest, path: Path) -> None:
    """Small files whole; weight files by size, safetensors header and their first MiB (cheap for 16 GB)."""
    size = path.stat().st_size
    digest.update(f"{path.name}:{size}".encode())
    with open(path, "rb") as stream:
        if size <= IDENTITY_SAMPLE_BYTES:
            digest.update(stream.read())
            return
        if path.suffix == SUFFIX:
            digest.update(raw_header(stream, size))
        digest.update(stream.read(IDENTITY_SAMPLE_BYTES))


def snapshot_identity(pipeline_folder: str | os.PathLike, parts: tuple[str, ...]) -> str:
    """Hash of some of a snapshot's folders (e.g. text_encoder and tokenizer): configs, small files, weight headers."""
    digest = hashlib.sha256()
    for part in parts:
        folder = Path(pipeline_folder) / part
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(pipeline_folder)).encode())
            _hash_file(digest, path)
    return digest.hexdigest()[:32]


def tensor_sha256(tensors: list[torch.Tensor]) -> str:
    """sha256 of the tensors' bytes, one after the other (each contiguous, on the host)."""
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.contiguous().view(torch.uint8).numpy())
    return digest.hexdigest()


class NodeStore(Generic[Item, Located]):
    """Files under `root`/<hash of `key`>, one per item. A kind of store says what its items are (`name`,
    `describe`), how a file is checked (`check`) and what its messages call things (`what`, `noun`, `dir_key`,
    `error`)."""

    what = "store"  # in messages: "prompt store"
    noun = "item"  # in messages: what an item is, e.g. "instruction"
    dir_key = ""  # the config key of the store's folder
    error: type[StoreError] = StoreError

    def __init__(self, root: str | os.PathLike, key: dict):
        self.key = json.dumps(key, sort_keys=True)
        self.folder = Path(root).expanduser() / hashlib.sha256(self.key.encode()).hexdigest()[:16]
        self._located: dict[str, Located] = {}

    def name(self, item: Item) -> str:
        """The string the item's file is named after (hashed)."""
        raise NotImplementedError

    def describe(self, item: Item) -> str:
        return repr(self.name(item))

    def check(self, path: Path, item: Item) -> Located:
        """Where the item's tensors lie in `path`; ValueError/KeyError/TypeError/OSError when the file is not the
        item's or is damaged."""
        raise NotImplementedError

    def path(self, item: Item) -> Path:
        return self.folder / (hashlib.sha256(self.name(item).encode()).hexdigest()[:32] + SUFFIX)

    def locate(self, item: Item) -> Located | None:
        """The item's checked file, or None when absent or corrupt (a corrupt one is warned about)."""
        name = self.name(item)
        located = self._located.get(name)
        if located is not None:
            return located
        path = self.path(item)
        if not path.is_file():
            return None
        try:
            located = self.check(path, item)
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("%s: %s is corrupt (%s); encoding its %s again", self.what, path, error, self.noun)
            return None
        self._located[name] = located
        return located

    def has(self, item: Item) -> bool:
        return self.locate(item) is not None

    def missing(self, items: list[Item]) -> list[Item]:
        return [item for item in items if self.locate(item) is None]

    def _ensure_writable(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(dir=self.folder, prefix=".write-probe.")
            os.close(handle)
            os.unlink(probe)
        except OSError as error:
            raise self.error(
                f"{self.dir_key}: cannot write to {self.folder} ({error.strerror or error}); set {self.dir_key} "
                "to a writable folder"
            ) from None

    def publish(self, item: Item, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
        """Write the item's file (host tensors, the key and the item in its metadata); readers never see a partial
        file."""
        from safetensors.torch import save

        payload = save(tensors, metadata={"key": self.key, **metadata})
        path = self.path(item)
        try:
            write_bytes_atomic(path, payload)
        except OSError as error:
            raise self.error(
                f"{self.dir_key}: writing {path} failed ({error.strerror or error}); nothing partial was kept. "
                f"Free space there or set {self.dir_key} to a folder with room for the store"
            ) from None
        self._located.pop(self.name(item), None)

    def stored_bytes(self, items: Sequence[Item]) -> int:
        """The size of the items' files; each must be there (after fill_missing), else the store's error."""
        total = 0
        for item in items:
            located = self.locate(item)
            if located is None:
                raise self.error(f"{self.what}: {self.describe(item)} is missing from {self.folder} right after the "
                                 f"fill that wrote it (deleted or damaged since); fill {self.dir_key} again")
            total += located.path.stat().st_size
        return total

    def fill_missing(self, wanted: list[Item], produce: Callable[[list[Item]], None], ranks: Ranks) -> int:
        """Produce every missing item of `wanted` exactly once per store; every rank calls this with the same list.
        `produce(share)` publishes each item of this rank's share. Returns how many items all ranks produced.

        First the missing ones are split over all ranks (enough when the store is shared by every node); then
        whatever a rank still cannot see (a node-local store on another node) is split over its node's ranks.
        """
        produced = 0
        ranks.all_sum(0)  # nobody lists while another rank is already writing
        for index, count in ((ranks.rank, ranks.world), (ranks.local_rank, ranks.local_world)):
            share = self.missing(wanted)[index::count]
            ranks.all_sum(0)
            failure = None
            try:
                if share:
                    self._ensure_writable()
                    produce(share)
            except self.error as error:
                failure = error
            failed = ranks.all_sum(int(failure is not None))
            if failure is not None:
                raise failure
            if failed:
                raise self.error(f"{failed} other rank(s) could not write the {self.what} at {self.folder}; "
                                 "their messages say why")
            produced += ranks.all_sum(len(share))
        left = self.missing(wanted)
        if left:
            raise self.error(f"{self.what} {self.folder}: {len(left)} {self.noun}(s) still missing after encoding, "
                             f"e.g. {self.describe(left[0])}; is {self.dir_key} on a filesystem that loses writes?")
        return produced

    def mapped(self, path: Path, offset: int, nbytes: int, changed: Callable[[object], str]) -> np.memmap:
        """`nbytes` of `path` from `offset`, memory-mapped copy-on-write (page-cache pages stay shared between
        processes); `changed(reason)` is the error's message when the file was deleted or cut short since it was
        checked."""
        try:
            return np.memmap(path, dtype=np.uint8, mode="c", offset=offset, shape=(nbytes,))
        except (OSError, ValueError) as error:
            raise self.error(changed(error)) from None
