"""Adaptive action ensembling (the original's RoboCasa client): blend the current step's action across recent chunks.

Each call brings a new chunk predicted at the current step. The chunk from k calls ago predicted the current step
at its row k; those rows (oldest first, newest last) are weighted by exp(alpha * cos(row, newest)) normalised to 1,
so predictions agreeing with the newest count more. With alpha = 0 it is the plain mean.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class AdaptiveEnsembler:
    def __init__(self, horizon: int, alpha: float = 0.0):
        if horizon < 1:
            raise ValueError(f"ensemble horizon {horizon}: it must be at least 1 (chunks to blend)")
        self.horizon, self.alpha = int(horizon), float(alpha)
        self._chunks: deque[np.ndarray] = deque(maxlen=self.horizon)

    def reset(self) -> None:
        self._chunks.clear()

    def __call__(self, prediction: np.ndarray) -> np.ndarray:
        """One action (D,) for the current step from a chunk (T, D) predicted now (or a single action (D,))."""
        prediction = np.asarray(prediction, dtype=np.float64)
        if prediction.ndim == 2 and prediction.shape[0] < self.horizon:
            raise ValueError(f"a {prediction.shape[0]}-step chunk cannot cover an ensemble horizon of {self.horizon}; "
                             "lower the horizon to at most the chunk length")
        self._chunks.append(prediction)
        count = len(self._chunks)
        if prediction.ndim == 1:
            rows = np.stack(self._chunks)
        else:
            rows = np.stack([chunk[count - 1 - age] for age, chunk in enumerate(self._chunks)])
        newest = rows[-1]
        cosine = rows @ newest / (np.linalg.norm(rows, axis=1) * np.linalg.norm(newest) + 1e-7)
        weights = np.exp(self.alpha * cosine)
        weights /= weights.sum()
        return weights @ rows
