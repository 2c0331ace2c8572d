"""The msgpack-numpy wire format: the tagged-map layout of UPSTREAM_SPEC §8.2, round trips, refused dtypes."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from DiT4DiT.serving import wire


def test_an_array_travels_as_the_documented_tagged_map():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    raw = msgpack.unpackb(wire.pack({"a": array}))  # plain msgpack, no hook: the layout as another client sees it
    assert raw == {"a": {b"__ndarray__": True, b"data": array.tobytes(), b"dtype": "<f4", b"shape": [2, 3]}}
    scalar = msgpack.unpackb(wire.pack(np.int64(7)))
    assert scalar == {b"__npgeneric__": True, b"data": 7, b"dtype": "<i8"}


@pytest.mark.parametrize("dtype", ["uint8", "float32", "float64", "int64", "bool", "float16"])
def test_arrays_round_trip_with_dtype_and_shape(dtype):
    array = (np.arange(24) % 5).astype(dtype).reshape(2, 3, 4)
    back = wire.unpack(wire.pack({"examples": [{"image": [array], "lang": "x"}], "n": np.float32(0.5)}))
    got = back["examples"][0]["image"][0]
    assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array)
    assert back["examples"][0]["lang"] == "x" and back["n"] == np.float32(0.5) and isinstance(back["n"], np.float32)


def test_a_non_contiguous_array_is_sent_in_c_order():
    array = np.arange(12, dtype=np.int32).reshape(3, 4).T
    assert np.array_equal(wire.unpack(wire.pack(array)), array)


@pytest.mark.parametrize("value", [np.array([object()]), np.zeros(2, dtype=np.complex64), np.zeros(2, dtype="V4")])
def test_object_complex_and_void_arrays_are_refused(value):
    with pytest.raises(TypeError, match="cannot travel over the wire"):
        wire.pack(value)
