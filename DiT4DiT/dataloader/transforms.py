"""Per-dimension state/action normalisation (min_max, q99, mean_std, binary, identity, sincos) and its inverse, and
a robot state encoded as training feeds it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from DiT4DiT.dataloader.errors import DataError

NORMALIZATION_MODES = ("min_max", "q99", "mean_std", "binary", "identity", "sincos")
BINARY_THRESHOLD = 0.5
STD_FLOOR = 1e-8


def encoded_width(modes: Sequence[str]) -> int:
    """Width of a normalised vector: every sincos dim becomes two (its sine and its cosine)."""
    return len(modes) + sum(1 for m in modes if m == "sincos")


def _encoding_index(modes: np.ndarray, key_widths: Sequence[int]) -> np.ndarray:
    """Positions in [per-dim values | sin(x) | cos(x)] (each len(modes) long) giving the encoded vector.

    As the original's sin/cos state transform: a sincos key of width w becomes [sin(v_1..v_w), cos(v_1..v_w)]
    in place of v; every other key keeps its place.
    """
    width, start = len(modes), 0
    index: list[int] = []
    for key_width in key_widths:
        dims = np.arange(start, start + key_width)
        if (modes[dims] == "sincos").all():
            index.extend(width + dims)
            index.extend(2 * width + dims)
        elif (modes[dims] == "sincos").any():
            raise DataError(f"dims {start}..{start + key_width - 1} mix sincos with other modes; sincos applies to whole keys")
        else:
            index.extend(dims)
        start += key_width
    if start != width:
        raise DataError(f"key widths {list(key_widths)} add up to {start}, but there are {width} normalisation modes")
    return np.asarray(index, dtype=np.int64)


class Normalizer:
    """Normalises vectors whose dims each follow one mode, with statistics of the same width.

    - min_max:  2 (x - min) / (max - min) - 1; 0 where max == min
    - q99:      2 (x - q01) / (q99 - q01) - 1, clipped to [-1, 1]; raw where q01 == q99
    - mean_std: (x - mean) / std; raw where std is (numerically) 0
    - binary:   1 where x > 0.5 else 0
    - identity: x (the original leaves keys without a mode raw, e.g. LIBERO's gripper action)
    - sincos:   [sin(x), cos(x)] per key (`key_widths` says where keys start), so the output is wider
    `unnormalize` inverts each exactly (q99 within [q01, q99]; binary gives 0/1; sincos gives the angle in
    (-pi, pi]).
    """

    def __init__(self, modes: Sequence[str], stats: Mapping[str, Sequence[float] | np.ndarray],
                 key_widths: Sequence[int] | None = None):
        unknown = sorted(set(modes) - set(NORMALIZATION_MODES))
        if unknown:
            raise DataError(f"unknown normalisation mode(s) {unknown}; use one of {list(NORMALIZATION_MODES)}")
        arrays = {name: np.asarray(stats[name], dtype=np.float64) for name in ("min", "max", "q01", "q99", "mean", "std")}
        widths = {name: len(a) for name, a in arrays.items()}
        if set(widths.values()) != {len(modes)}:
            raise DataError(f"normalisation modes ({len(modes)} dims) and statistics ({widths}) differ in width")
        self.modes = np.asarray(modes)
        q99 = self.modes == "q99"
        self.low = np.where(q99, arrays["q01"], arrays["min"])
        self.high = np.where(q99, arrays["q99"], arrays["max"])
        self.mean, self.std = arrays["mean"], arrays["std"]
        spread = self.high > self.low
        self._span = np.where(spread, self.high - self.low, 1.0)
        self._ranged = np.isin(self.modes, ("min_max", "q99"))
        self._flat_min_max = (self.modes == "min_max") & ~spread
        # A constant dim's std is float noise (~1e-16), not 0: below STD_FLOOR it counts as zero.
        steady = self.std > STD_FLOOR
        self._raw = (q99 & ~spread) | ((self.modes == "mean_std") & ~steady)
        self._std = np.where(steady, self.std, 1.0)
        self._raw |= np.isin(self.modes, ("identity", "sincos"))
        self._index = None
        if "sincos" in self.modes:
            if key_widths is None:
                raise DataError("sincos normalisation needs the width of each key (key_widths) to place sin and cos")
            self._index = _encoding_index(self.modes, key_widths)
            sincos = np.flatnonzero(self.modes == "sincos")
            # Where each raw dim is read back from: its own slot, or its sine and cosine slots.
            width = len(self.modes)
            position: np.ndarray = np.zeros(3 * width, dtype=np.int64)
            position[self._index] = np.arange(len(self._index))
            self._plain_from = np.where(self.modes == "sincos", 0, position[:width])
            self._sin_from, self._cos_from = position[width + sincos], position[2 * width + sincos]
            self._sincos = sincos
        self.key_widths = None if key_widths is None else [int(w) for w in key_widths]

    def normalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        ranged = 2.0 * (x - self.low) / self._span - 1.0
        ranged = np.where(self.modes == "q99", np.clip(ranged, -1.0, 1.0), ranged)
        ranged = np.where(self._flat_min_max, 0.0, ranged)
        out = np.where(self._ranged, ranged, (x - self.mean) / self._std)
        out = np.where(self.modes == "binary", (x > BINARY_THRESHOLD).astype(np.float64), out)
        out = np.where(self._raw, x, out)
        if self._index is None:
            return out
        return np.concatenate([out, np.sin(x), np.cos(x)], axis=-1)[..., self._index]

    def unnormalize(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if self._index is not None:
            if y.shape[-1] != len(self._index):
                raise DataError(f"a sin/cos-encoded vector is {len(self._index)} wide, got {y.shape[-1]}")
            angles = np.arctan2(y[..., self._sin_from], y[..., self._cos_from])
            y = y[..., self._plain_from].copy()
            y[..., self._sincos] = angles
        ranged = (y + 1.0) / 2.0 * self._span + self.low
        ranged = np.where(self._flat_min_max, self.low, ranged)
        out = np.where(self._ranged, ranged, y * self._std + self.mean)
        out = np.where(self.modes == "binary", (y > BINARY_THRESHOLD).astype(np.float64), out)
        return np.where(self._raw, y, out)

    @classmethod
    def from_statistics(cls, section: Mapping, modes: Sequence[str] | None = None,
                        key_widths: Sequence[int] | None = None) -> "Normalizer":
        """From a `state` / `action` section of dataset_statistics.json.

        Our files name the modes (`normalization`) and key widths (`key_widths`). The original's files name
        neither: pass `modes` (e.g. from the data config), or, for actions, get what the original's clients
        apply: min_max on the dims its `mask` marks true and the raw value on the others.
        """
        if modes is None:
            modes = section.get("normalization")
        if modes is None:
            if "mask" not in section:
                raise DataError("this statistics section names no normalisation modes (a file written by the original "
                                "DiT4DiT); pass modes=, e.g. from the data config that trained the model")
            modes = ["min_max" if kept else "identity" for kept in section["mask"]]
        return cls(modes, section, key_widths if key_widths is not None else section.get("key_widths"))


class StateEncoder:
    """A robot's raw state -> (1, state_dim) float32 as training feeds the model: normalised per dim with the run's
    `state` statistics (sin/cos keys become two values each), zero-padded to the model's state width. The policy
    server (an example's "state_units": "robot") and the simulator clients encode with it."""

    def __init__(self, section: Mapping, state_dim: int):
        self.normalizer = Normalizer.from_statistics(section)
        self.width = len(self.normalizer.modes)
        self.state_dim = int(state_dim)
        encoded = encoded_width(self.normalizer.modes)
        if encoded > self.state_dim:
            raise DataError(f"the run's state statistics encode {self.width} values as {encoded}, wider than the "
                            f"model's state ({self.state_dim}, framework.action_model.state_dim)")

    def __call__(self, raw) -> np.ndarray:
        raw = np.asarray(raw, dtype=np.float64).reshape(-1)
        if raw.size != self.width:
            raise DataError(f"the robot state has {raw.size} values but the run's statistics describe {self.width}; "
                            "send the state keys the model was trained on, in the data config's order")
        encoded = self.normalizer.normalize(raw)
        out: np.ndarray = np.zeros((1, self.state_dim), dtype=np.float32)
        out[0, : encoded.size] = encoded
        return out
