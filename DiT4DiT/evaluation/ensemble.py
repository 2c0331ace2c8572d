"""Adaptive action ensembling (the original's RoboCasa client): blend the current step's action across recent chunks.

Each call brings a new chunk predicted at the current step. The chunk from k calls ago predicted the current step
at its row k; those rows (oldest first, newest last) are weighted by exp(alpha * cos(row, newest)) normalised to 1,
so predictions agreeing with the newest count more. With alpha = 0 it is the plain mean.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from DiT4DiT.evaluation.errors import BadArgument


def check_horizon(horizon: int, chunk: int | None = None) -> None:
    """A horizon the ensembler can blend: at least one chunk, and no more chunks than a chunk has rows (the oldest
    chunk kept must still predict the current step)."""
    if horizon < 1:
        raise BadArgument(f"--ensemble_horizon {horizon}: blend at least 1 chunk, or pass 0 to execute chunks")
    if chunk is not None and chunk < horizon:
        raise BadArgument(f"--ensemble_horizon {horizon}: a {chunk}-step chunk cannot cover it; use at most {chunk}")


class AdaptiveEnsembler:
    def __init__(self, horizon: int, alpha: float = 0.0):
        check_horizon(horizon)
        self.horizon, self.alpha = int(horizon), float(alpha)
        self._chunks: deque[np.ndarray] = deque(maxlen=self.horizon)

    def reset(self) -> None:
        self._chunks.clear()

    def __call__(self, prediction: np.ndarray) -> np.ndarray:
        """One action (D,) for the current step from a chunk (T, D) predicted now (or a single action (D,))."""
        prediction = np.asarray(prediction, dtype=np.float64)
        if prediction.ndim == 2:
            check_horizon(self.horizon, prediction.shape[0])
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
