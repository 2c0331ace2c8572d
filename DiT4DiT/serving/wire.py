"""The wire format of the original DiT4DiT policy server: msgpack, with numpy arrays and scalars as tagged maps.

An array travels as {b"__ndarray__": True, b"data": its C-order bytes, b"dtype": dtype.str, b"shape": [...]};
a numpy scalar as {b"__npgeneric__": True, b"data": its Python value, b"dtype": dtype.str}. Object, void and
complex dtypes are refused, so nothing ever falls back to pickle.
"""

from __future__ import annotations

import msgpack
import numpy as np

_REFUSED_KINDS = ("O", "V", "c")
# The shared token, when the server requires one: the server's --token default and our client's.
TOKEN_ENV = "DIT4DIT_SERVER_TOKEN"


def _encode(obj):
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in _REFUSED_KINDS:
        raise TypeError(f"numpy dtype {obj.dtype} cannot travel over the wire (object, void and complex are refused)")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__} over the wire")


class WireError(ValueError):
    """A frame that is not msgpack, or whose tagged numpy maps do not describe a value."""


def _decode(obj: dict):
    if b"__ndarray__" not in obj and b"__npgeneric__" not in obj:
        return obj
    try:
        dtype = np.dtype(obj[b"dtype"])
        if dtype.kind in _REFUSED_KINDS:
            raise TypeError(f"dtype {dtype} is refused (object, void and complex)")
        if b"__ndarray__" in obj:
            # A read-only view over the received bytes, as in the original: no copy of large images.
            return np.ndarray(buffer=obj[b"data"], dtype=dtype, shape=tuple(obj[b"shape"]))
        return dtype.type(obj[b"data"])
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        raise WireError(f"a tagged numpy map does not describe a value: {error}") from None


def pack(obj) -> bytes:
    return msgpack.packb(obj, default=_encode)


def unpack(data: bytes):
    """The message; WireError for anything that does not decode."""
    try:
        return msgpack.unpackb(data, object_hook=_decode)
    except WireError:
        raise
    except Exception as error:  # msgpack raises several unrelated types for undecodable bytes
        raise WireError(f"not msgpack ({type(error).__name__}: {error})") from None
