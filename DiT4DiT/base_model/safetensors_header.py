"""The header of a .safetensors file, read without its tensors: the one reader that the pipeline-folder check, the
memory estimate and the prompt store share. (Standard library only.)

The format: an 8-byte little-endian length, that many bytes of JSON (tensor name -> dtype, shape and data offsets,
plus an optional "__metadata__" of strings), then the tensors' bytes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypedDict

# The safetensors library refuses longer headers; a garbage length is caught before reading that much.
MAX_HEADER_BYTES = 100_000_000


class TensorEntry(TypedDict):
    """One tensor's entry in the header (the file's dtype name, e.g. "BF16"; offsets count from the data start)."""
    dtype: str
    shape: list[int]
    data_offsets: list[int]


class HeaderError(ValueError):
    """The file cannot be a safetensors file; the message says why, without the path (callers add it)."""


@dataclass(frozen=True)
class Header:
    length: int  # bytes of JSON after the 8-byte length
    file_size: int
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    data_end: int  # where the last tensor ends, counted from data_start

    @property
    def data_start(self) -> int:
        """Offset in the file of the first tensor byte (tensors' data_offsets count from here)."""
        return 8 + self.length

    @property
    def described_size(self) -> int:
        """The file size the header describes."""
        return self.data_start + self.data_end


def raw_header(stream: BinaryIO, file_size: int) -> bytes:
    """The 8-byte length and the JSON after it, unparsed, read from the start of `stream`."""
    prefix = stream.read(8)
    if len(prefix) < 8:
        raise HeaderError(f"{file_size} bytes, too short for a safetensors header")
    (length,) = struct.unpack("<Q", prefix)
    if length > file_size - 8:
        raise HeaderError(f"not a safetensors file (header length {length} > file size {file_size})")
    if length > MAX_HEADER_BYTES:
        raise HeaderError(f"not a safetensors file (header length {length} > the format's {MAX_HEADER_BYTES})")
    return prefix + stream.read(length)


def read_header(path: str | Path) -> Header:
    """The parsed header of the file at `path`; HeaderError when the file is too short or the header is not one."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as stream:
        raw = raw_header(stream, size)
    try:
        parsed = json.loads(raw[8:])
        tensors = {name: entry for name, entry in parsed.items() if name != "__metadata__"}
        data_end = max((int(entry["data_offsets"][1]) for entry in tensors.values()), default=0)
        return Header(len(raw) - 8, size, tensors, dict(parsed.get("__metadata__") or {}), data_end)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise HeaderError("not a safetensors file (unreadable header)") from None
