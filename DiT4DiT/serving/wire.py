"""The wire format of the original DiT4DiT policy server: msgpack, with numpy arrays and scalars as tagged maps.

An array travels as {b"__ndarray__": True, b"data": its C-order bytes, b"dtype": dtype.str, b"shape": [...]};
a numpy scalar as {b"__npgeneric__": True, b"data": its Python value, b"dtype": dtype.str}. Object, void and
complex dtypes are refused, so nothing ever falls back to pickle.
"""

from __future__ import annotations

import msgpack
import numpy as np

_REFUSED_KINDS = ("O", "V", "c")


def _encode(obj):
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in _REFUSED_KINDS:
        raise TypeError(f"numpy dtype {obj.dtype} cannot travel over the wire (object, void and complex are refused)")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__} over the wire")


def _decode(obj: dict):
    if b"__ndarray__" in obj:
        # A read-only view over the received bytes, as in the original: no copy of large images.
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=tuple(obj[b"shape"]))
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def pack(obj) -> bytes:
    return msgpack.packb(obj, default=_encode)


def unpack(data: bytes):
    return msgpack.unpackb(data, object_hook=_decode)
