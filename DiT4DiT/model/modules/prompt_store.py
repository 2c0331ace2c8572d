"""Prompt-embedding store: each instruction's embedding is encoded once per store and memory-mapped by readers.

A node store (node_store.py: keyed folder, one checksummed file per item, filled across ranks, atomic writes,
memory-mapped reads) of one (max_sequence_length, D) embedding per instruction, under a folder keyed by the text
encoder and tokenizer identity, max_sequence_length, dtype and file format. Each file records the sha256 of its
embedding, checked once per process when the file is first mapped: an embedding changed after it was written
(other numbers, a file cut short) stops the run instead of training it. A process's private memory does not grow
with the number of instructions (98 MiB per embedding at 2B size).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from DiT4DiT.model.modules.node_store import SAFETENSORS_DTYPES, NodeStore, Ranks, StoreError, snapshot_identity, tensor_sha256
from DiT4DiT.base_model.safetensors_header import read_header

STORE_DIR_KEY = "framework.cosmos25.prompt_store_dir"
TENSOR_NAME = "embedding"
# 2: each file's metadata holds the sha256 of its embedding (stores without it are a folder of their own).
FORMAT = 2


class PromptStoreError(StoreError):
    """The prompt store cannot be written or is incomplete; the message names the key or file to fix."""


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


def encoder_identity(pipeline_folder: str | os.PathLike) -> str:
    """Hash of the snapshot's text_encoder and tokenizer folders: configs, tokenizer files, weight headers."""
    return snapshot_identity(pipeline_folder, ("text_encoder", "tokenizer"))


class PromptStore(NodeStore[str, _Located]):
    """Instruction -> (max_sequence_length, D) embedding, stored under `root` for one text encoder."""

    what, noun, dir_key, error = "prompt store", "instruction", STORE_DIR_KEY, PromptStoreError

    def __init__(self, root: str | os.PathLike, identity: str, max_sequence_length: int, dtype: torch.dtype):
        super().__init__(root, {"encoder": identity, "max_sequence_length": int(max_sequence_length),
                                "dtype": str(dtype), "format": FORMAT})
        self.max_sequence_length = int(max_sequence_length)
        self.dtype = dtype
        self._verified: set[str] = set()  # instructions whose mapped bytes matched their sha256 in this process

    def name(self, instruction: str) -> str:
        return instruction

    def check(self, path: Path, instruction: str) -> _Located:
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

    def write(self, instruction: str, embedding: torch.Tensor) -> None:
        """Publish one (max_sequence_length, D) embedding; readers never see a partial file."""
        tensor = embedding.detach().to("cpu", self.dtype).contiguous()
        self.publish(instruction, {TENSOR_NAME: tensor}, {"instruction": instruction, "sha256": tensor_sha256([tensor])})
        self._verified.discard(instruction)

    def fill(
        self,
        instructions: Iterable[str],
        encode: Callable[[list[str]], torch.Tensor],
        ranks: Ranks = Ranks(),
        batch_size: int = 8,
    ) -> FillReport:
        """Encode every missing instruction exactly once per store; every rank calls this with the same list."""
        wanted = sorted(set(instructions))

        @torch.no_grad()
        def encode_share(share: list[str]) -> None:
            for start in range(0, len(share), batch_size):
                chunk = share[start : start + batch_size]
                for instruction, embedding in zip(chunk, encode(chunk)):
                    self.write(instruction, embedding)

        encoded = self.fill_missing(wanted, encode_share, ranks)
        return FillReport(len(wanted), encoded, self.stored_bytes(wanted), self.folder)

    def embedding(self, instruction: str) -> torch.Tensor:
        """The stored embedding, memory-mapped (copy-on-write: page-cache pages stay shared between processes)."""
        located = self.locate(instruction)
        if located is None:
            raise KeyError(instruction)

        def changed(reason) -> str:
            return (f"{located.path}: the prompt store's embedding of {instruction!r} changed after it was written "
                    f"({reason}); delete the file and start again (the instruction is encoded anew)")

        mapped = self.mapped(located.path, located.offset, located.nbytes, changed)
        if instruction not in self._verified:
            if tensor_sha256([torch.from_numpy(mapped)]) != located.sha256:
                raise PromptStoreError(changed("its sha256 differs from the one it was written with"))
            self._verified.add(instruction)
        return torch.from_numpy(mapped).view(self.dtype).view(located.shape)

