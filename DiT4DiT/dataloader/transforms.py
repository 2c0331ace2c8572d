"""Per-dimension state/action normalisation (min_max, q99, mean_std, binary) and its exact inverse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from DiT4DiT.dataloader.errors import DataError

NORMALIZATION_MODES = ("min_max", "q99", "mean_std", "binary")
BINARY_THRESHOLD = 0.5
STD_FLOOR = 1e-8


class Normalizer:
    """Normalises vectors whose dims each follow one mode, with statistics of the same width.

    - min_max:  2 (x - min) / (max - min) - 1; 0 where max == min
    - q99:      2 (x - q01) / (q99 - q01) - 1, clipped to [-1, 1]; raw where q01 == q99
    - mean_std: (x - mean) / std; raw where std is (numerically) 0
    - binary:   1 where x > 0.5 else 0
    `unnormalize` inverts each exactly (q99 within [q01, q99]; binary gives 0/1).
    """

    def __init__(self, modes: Sequence[str], stats: Mapping[str, Sequence[float]]):
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

    def normalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        ranged = 2.0 * (x - self.low) / self._span - 1.0
        ranged = np.where(self.modes == "q99", np.clip(ranged, -1.0, 1.0), ranged)
        ranged = np.where(self._flat_min_max, 0.0, ranged)
        out = np.where(self._ranged, ranged, (x - self.mean) / self._std)
        out = np.where(self.modes == "binary", (x > BINARY_THRESHOLD).astype(np.float64), out)
        return np.where(self._raw, x, out)

    def unnormalize(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        ranged = (y + 1.0) / 2.0 * self._span + self.low
        ranged = np.where(self._flat_min_max, self.low, ranged)
        out = np.where(self._ranged, ranged, y * self._std + self.mean)
        out = np.where(self.modes == "binary", (y > BINARY_THRESHOLD).astype(np.float64), out)
        return np.where(self._raw, y, out)

    @classmethod
    def from_statistics(cls, section: Mapping) -> "Normalizer":
        """From a `state` / `action` section of dataset_statistics.json (its `normalization` list gives the modes)."""
        return cls(section["normalization"], section)
