"""Real-time chunking (RTC) for the flow-matching head: the prefix a request carries, its soft mask and guidance
weight at inference, and the delays training-time RTC draws.

P1 = Black, Galliker, Levine, "Real-Time Execution of Action Chunking Flow Policies", arXiv 2506.07339 (inference).
P2 = Black, Ren, Equi, Levine, "Training-Time Action Conditioning for Efficient Real-Time Chunking", arXiv 2512.05964.

While chunk k executes, chunk k+1 is computed from a newer observation. Its first d actions execute before it
arrives (they are chunk k's, whatever the model says), and the rows after them should continue chunk k: P1 treats
this as inpainting. The prefix Y is chunk k's not-yet-executed rows, aligned with the new chunk's rows (row 0 =
the step of the new observation), in the model's normalised units.

Time convention: our head integrates t from 1 (noise) to 0 (actions), x_t = (1 - t) a + t eps, v = eps - a. The
papers use tau = 1 - t (x_tau = tau a + (1 - tau) eps, v_tau = a - eps = -v). Each formula below is the paper's,
rewritten with tau = 1 - t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from DiT4DiT.config.sections import FrameworkActionModelRtcTrainingSection
from DiT4DiT.model.modules.host_to_device import to_device

# beta, P1's clip of the guidance weight (5 with its 5 flow steps; the weight is 2 to 3.3 at our 4 steps' inner
# times and only reaches the clip at the first step, t = 1).
MAX_GUIDANCE_WEIGHT = 5.0
# The request keys of an example that asks for RTC (serving/policy.py checks them).
PREFIX_KEYS = ("prev_actions", "inference_delay", "execution_horizon")


def soft_mask(horizon: int, delay: int, end: int) -> np.ndarray:
    """(horizon,) prefix weights W of P1 Eq. 5: 1 on the d frozen rows; c (e^c - 1) / (e - 1) with
    c_i = (end - i) / (end - d + 1) on the guided overlap d <= i < end (decaying from near 1 towards 0); 0 from
    `end` on, where the previous chunk has no rows (P1's end is H - s, s the actions executed per chunk)."""
    weights: np.ndarray = np.zeros(horizon, dtype=np.float64)
    weights[:delay] = 1.0
    rows = np.arange(delay, end)
    c = (end - rows) / (end - delay + 1)
    weights[delay:end] = c * np.expm1(c) / (math.e - 1)
    return weights


def guidance_weight(t: float, beta: float = MAX_GUIDANCE_WEIGHT) -> float:
    """P1 Eq. 4's weight at flow time t (tau = 1 - t): with r^2 = (1 - tau)^2 / (tau^2 + (1 - tau)^2),
    min(beta, (1 - tau) / (tau r^2)) = min(beta, (tau^2 + (1 - tau)^2) / (tau (1 - tau))); infinite at both ends,
    where it is beta."""
    tau = 1.0 - t
    if tau <= 0.0 or tau >= 1.0:
        return beta
    return min(beta, (tau * tau + (1 - tau) ** 2) / (tau * (1 - tau)))


@dataclass(frozen=True)
class ChunkPrefix:
    """What the examples of one batch ask of RTC, on the model's device. Rows of examples without RTC have zero
    weights and no frozen actions, so their sampling is the plain one."""

    actions: torch.Tensor  # (B, H, D) previous chunk's rows aligned with the new chunk, normalised; padded past them
    weights: torch.Tensor  # (B, H) soft mask (soft_mask), 0 for examples without RTC
    frozen: torch.Tensor  # (B, H) bool: the first d rows of each example

    @classmethod
    def of(cls, examples: list[dict], horizon: int, action_dim: int, device: torch.device,
           dtype: torch.dtype) -> "ChunkPrefix | None":
        """From the examples' prev_actions (n, action_dim), inference_delay d and execution_horizon (the mask's
        end, default n), checked by the policy; None when no example carries a prefix."""
        if not any("prev_actions" in example for example in examples):
            return None
        actions: np.ndarray = np.zeros((len(examples), horizon, action_dim), dtype=np.float32)
        weights: np.ndarray = np.zeros((len(examples), horizon), dtype=np.float32)
        frozen: np.ndarray = np.zeros((len(examples), horizon), dtype=bool)
        for row, example in enumerate(examples):
            if "prev_actions" not in example:
                continue
            previous = np.asarray(example["prev_actions"], dtype=np.float32)
            count, delay = len(previous), int(example["inference_delay"])
            actions[row, :count] = previous
            actions[row, count:] = previous[-1]  # unused (weight 0); the last row rather than zeros (the mean)
            weights[row] = soft_mask(horizon, delay, int(example.get("execution_horizon", count)))
            frozen[row, :delay] = True
        return cls(to_device(torch.from_numpy(actions), device, dtype), to_device(torch.from_numpy(weights), device,
                   dtype), to_device(torch.from_numpy(frozen), device))


def training_prefix(batch: int, horizon: int, rtc: FrameworkActionModelRtcTrainingSection,
                    device: torch.device) -> torch.Tensor:
    """(batch, horizon) bool, True on each example's first d actions, d drawn per example from rtc.distribution
    over 0..max_delay (P2: the prefix is given clean and left out of the loss). Drawn with torch's CPU generator,
    whose state a checkpoint saves, so a resumed run draws the same delays."""
    delays = torch.arange(rtc.max_delay + 1, dtype=torch.float64)
    if rtc.distribution == "uniform":
        probabilities = torch.ones_like(delays)
    else:
        probabilities = torch.exp(-delays / rtc.temperature)
    drawn = torch.multinomial(probabilities, batch, replacement=True)
    return to_device(torch.arange(horizon)[None, :] < drawn[:, None], device)
