"""Prompt-embedding store: each instruction's embedding is encoded once per store and memory-mapped by readers.

One safetensors file per instruction, under a folder named after the key shared by all of them (text encoder
and tokenizer identity, max_sequence_length, dtype, file format), so a changed snapshot can never be served a stale
embedding. Each file records the sha256 of its embedding, checked once per process when the file is first mapped:
an embedding changed after it was written (other numbers, a file cut short) stops the run instead of training it. The instructions missing from the store are split across ranks and written atomically (temporary
file + rename); readers map the files, so a node's page cache holds one copy for all its processes and a
process's private memory does not grow with the number of instructions (98 MiB per embedding at 2B size).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from DiT4DiT.atomic_files import write_bytes_atomic
from DiT4DiT.config.schema import ConfigError
from DiT4DiT.model.modules.host_to_device import stack_to_device
from DiT4DiT.safetensors_header import raw_header, read_header

log = logging.getLogger(__name__)

STORE_DIR_KEY = "framework.cosmos25.prompt_store_dir"
TENSOR_NAME = "embedding"
SUFFIX = ".safetensors"
IDENTITY_SAMPLE_BYTES = 1 << 20
SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
# 2: each file's metadata holds the sha256 of its embedding (stores without it are a folder of their own).
FORMAT = 2


class PromptStoreError(ConfigError):
    """The store cannot be written or is incomplete; the message names the key or file to fix."""


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
        encoding or writing its share of the store for longer than a device collective waits."""
        world = accelerator.num_processes
        return cls(
            rank=accelerator.process_index,
            world=world,
            local_rank=accelerator.local_process_index,
            local_world=int(os.environ.get("LOCAL_WORLD_SIZE", world)),
            all_sum=all_sum,
        )


@dataclass(frozen=True)
class FillReport:
    instructions: int  # unique instructions asked for
    encoded: int  # encoded in this fill, by all ranks together
    store_bytes: int  # size of their files
    folder: Path


@dataclass(frozen=True)
class _Located:
    path: Path
    offset: int  # of the tensor data in the file
    nbytes: int
    shape: tuple[int, ...]
    sha256: str  # of the embedding's bytes, as written


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


def encoder_identity(pipeline_folder: str | os.PathLike) -> str:
    """Hash of the snapshot's text_encoder and tokenizer folders: configs, tokenizer files, weight headers."""
    digest = hashlib.sha256()
    for part in ("text_encoder", "tokenizer"):
        folder = Path(pipeline_folder) / part
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(pipeline_folder)).encode())
            _hash_file(digest, path)
    return digest.hexdigest()[:32]


class PromptStore:
    """Instruction -> (max_sequence_length, D) embedding, stored under `root` for one text encoder."""

    def __init__(self, root: str | os.PathLike, identity: str, max_sequence_length: int, dtype: torch.dtype):
        self.key = json.dumps(
            {"encoder": identity, "max_sequence_length": int(max_sequence_length), "dtype": str(dtype),
             "format": FORMAT}, sort_keys=True
        )
        self.folder = Path(root).expanduser() / hashlib.sha256(self.key.encode()).hexdigest()[:16]
        self.max_sequence_length = int(max_sequence_length)
        self.dtype = dtype
        self._located: dict[str, _Located] = {}
        self._verified: set[str] = set()  # instructions whose mapped bytes matched their sha256 in this process

    def path(self, instruction: str) -> Path:
        return self.folder / (hashlib.sha256(instruction.encode()).hexdigest()[:32] + SUFFIX)

    def _locate(self, instruction: str) -> _Located | None:
        """The instruction's checked file, or None when absent or corrupt (a corrupt one is warned about)."""
        located = self._located.get(instruction)
        if located is not None:
            return located
        path = self.path(instruction)
        if not path.is_file():
            return None
        try:
            located = self._check(path, instruction)
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("prompt store: %s is corrupt (%s); encoding its instruction again", path, error)
            return None
        self._located[instruction] = located
        return located

    def _check(self, path: Path, instruction: str) -> _Located:
        header = read_header(path)
        metadata, entry = header.metadata, header.tensors[TENSOR_NAME]
        if metadata["key"] != self.key or metadata["instruction"] != instruction:
            raise ValueError("its key or instruction differs from the file name's")
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if dtype != self.dtype or len(shape) != 2 or shape[0] != self.max_sequence_length:
            raise ValueError(f"it holds {entry['dtype']} {list(shape)}, not {self.dtype} ({self.max_sequence_length}, D)")
        if end - begin != int(np.prod(shape)) * dtype.itemsize or header.file_size != header.described_size:
            raise ValueError(f"its size {header.file_size} does not match its header")
        return _Located(path, header.data_start + begin, end - begin, shape, str(metadata["sha256"]))

    def missing(self, instructions: Iterable[str]) -> list[str]:
        return [p for p in sorted(set(instructions)) if self._locate(p) is None]

    def _ensure_writable(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(dir=self.folder, prefix=".write-probe.")
            os.close(handle)
            os.unlink(probe)
        except OSError as error:
            raise PromptStoreError(
                f"{STORE_DIR_KEY}: cannot write to {self.folder} ({error.strerror or error}); set {STORE_DIR_KEY} "
                "to a writable folder"
            ) from None

    def write(self, instruction: str, embedding: torch.Tensor) -> None:
        """Publish one (max_sequence_length, D) embedding; readers never see a partial file."""
        from safetensors.torch import save

        tensor = embedding.detach().to("cpu", self.dtype).contiguous()
        digest = hashlib.sha256(tensor.view(torch.uint8).numpy()).hexdigest()
        payload = save({TENSOR_NAME: tensor}, metadata={"key": self.key, "instruction": instruction, "sha256": digest})
        path = self.path(instruction)
        try:
            write_bytes_atomic(path, payload)
        except OSError as error:
            raise PromptStoreError(
                f"{STORE_DIR_KEY}: writing {path} failed ({error.strerror or error}); nothing partial was kept. "
                f"Free space there or set {STORE_DIR_KEY} to a folder with room for the store"
            ) from None
        self._located.pop(instruction, None)
        self._verified.discard(instruction)

    @torch.no_grad()
    def _encode_share(self, share: list[str], encode: Callable[[list[str]], torch.Tensor], batch_size: int) -> None:
        if share:
            self._ensure_writable()
        for start in range(0, len(share), batch_size):
            chunk = share[start : start + batch_size]
            for instruction, embedding in zip(chunk, encode(chunk)):
                self.write(instruction, embedding)

    def fill(
        self,
        instructions: Iterable[str],
        encode: Callable[[list[str]], torch.Tensor],
        ranks: Ranks = Ranks(),
        batch_size: int = 8,
    ) -> FillReport:
        """Encode every missing instruction exactly once per store; every rank calls this with the same list.

        First the missing ones are split over all ranks (enough when the store is shared by every node); then
        whatever a rank still cannot see (a node-local store on another node) is split over its node's ranks.
        """
        wanted = sorted(set(instructions))
        encoded = 0
        ranks.all_sum(0)  # nobody lists while another rank is already writing
        for index, count in ((ranks.rank, ranks.world), (ranks.local_rank, ranks.local_world)):
            share = self.missing(wanted)[index::count]
            ranks.all_sum(0)
            failure = None
            try:
                self._encode_share(share, encode, batch_size)
            except PromptStoreError as error:
                failure = error
            failed = ranks.all_sum(int(failure is not None))
            if failure is not None:
                raise failure
            if failed:
                raise PromptStoreError(f"{failed} other rank(s) could not write the prompt store at {self.folder}; "
                                       "their messages say why")
            encoded += ranks.all_sum(len(share))
        left = self.missing(wanted)
        if left:
            raise PromptStoreError(f"prompt store {self.folder}: {len(left)} instruction(s) still missing after "
                                   f"encoding, e.g. {left[0]!r}; is {STORE_DIR_KEY} on a filesystem that loses writes?")
        return FillReport(len(wanted), encoded, sum(self._located[p].path.stat().st_size for p in wanted), self.folder)

    def has(self, instruction: str) -> bool:
        return self._locate(instruction) is not None

    def embedding(self, instruction: str) -> torch.Tensor:
        """The stored embedding, memory-mapped (copy-on-write: page-cache pages stay shared between processes)."""
        located = self._locate(instruction)
        if located is None:
            raise KeyError(instruction)
        changed = (f"{located.path}: the prompt store's embedding of {instruction!r} changed after it was written "
                   "({}); delete the file and start again (the instruction is encoded anew)")
        try:
            mapped = np.memmap(located.path, dtype=np.uint8, mode="c", offset=located.offset, shape=(located.nbytes,))
        except (OSError, ValueError) as error:  # deleted or cut short since it was checked
            raise PromptStoreError(changed.format(error)) from None
        if instruction not in self._verified:
            if hashlib.sha256(mapped).hexdigest() != located.sha256:
                raise PromptStoreError(changed.format("its sha256 differs from the one it was written with"))
            self._verified.add(instruction)
        return torch.from_numpy(mapped).view(self.dtype).view(located.shape)

    def lookup(self, instructions: list[str], device: torch.device) -> torch.Tensor:
        """(B, max_sequence_length, D) on `device`: stacked from the mappings into pinned memory, copied once."""
        return stack_to_device([self.embedding(p) for p in instructions], device)
