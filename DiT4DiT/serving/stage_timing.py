"""Where a request's time goes: per-stage milliseconds of the model's forward, for the server's --profile replies
and bench/bench_latency.py.

A StageClock wraps, on one model instance, the callables that do each stage: the batch's conversion to device
tensors (preprocess), the prompt embeddings (store lookup or text encoder), the VAE encoding of the conditioning
frame, the backbone's forward (whose remainder is the Cosmos feature pass) and the action head's sampling. The
device is synchronised at every boundary, which costs a little on an accelerator: the server installs the clock
only with --profile. The server adds what happens outside the model: decoding the frame, checking the request,
the wait for the model thread, unnormalising the actions.
"""

from __future__ import annotations

import functools
import time

import torch

from DiT4DiT.serving.device import synchronize

# The stages a profiled reply reports, in request order.
STAGES = ("decode", "check", "queue_wait", "preprocess", "prompt", "vae_encode", "feature_pass", "action_sampling",
          "unnormalise")
# Measured inside the model thread (StageClock), one row per forward.
MODEL_STAGES = ("preprocess", "prompt", "vae_encode", "feature_pass", "action_sampling", "unnormalise")


class StageClock:
    """Wraps `model`'s stage callables (the DiT4DiT framework's) so that each forward's stage times are kept;
    `measure()` starts a forward's record and `stage_ms()` returns it (MODEL_STAGES, ms)."""

    def __init__(self, model, device: torch.device):
        self.device = device
        self._ms: dict[str, float] = {}
        extractor = model.backbone_interface.extractor
        self._wrap(model, "_model_batch", "preprocess")
        self._wrap(extractor, "prompt_embeddings", "prompt")
        self._wrap(extractor, "clip_posterior", "vae_encode")
        self._wrap(extractor, "forward", "backbone")
        self._wrap(model.action_model, "predict_action", "action_sampling")

    def _wrap(self, owner, name: str, stage: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            synchronize(self.device)
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                synchronize(self.device)
                self._ms[stage] = self._ms.get(stage, 0.0) + (time.perf_counter() - started) * 1e3

        # An instance attribute shadows the method; nn.Module.__call__ looks `forward` up on the instance too.
        object.__setattr__(owner, name, timed)

    def measure(self) -> None:
        self._ms = {}

    def add(self, stage: str, seconds: float) -> None:
        self._ms[stage] = self._ms.get(stage, 0.0) + seconds * 1e3

    def stage_ms(self) -> list[float]:
        """This forward's MODEL_STAGES in ms; the feature pass is the backbone's time less its prompt and VAE."""
        ms = dict(self._ms)
        ms["feature_pass"] = ms.pop("backbone", 0.0) - ms.get("prompt", 0.0) - ms.get("vae_encode", 0.0)
        return [round(ms.get(stage, 0.0), 3) for stage in MODEL_STAGES]


def reply_timing(model_ms, *, decode_s: float, check_s: float, queue_wait_s: float, total_s: float,
                 sampling_steps: int, forward_examples: int) -> dict:
    """A profiled reply's `timing`: every stage of STAGES in ms (the model's from its StageClock row), the request's
    total from frame to reply, the sampler's step count and the examples its forward held."""
    timing = {"decode_ms": decode_s * 1e3, "check_ms": check_s * 1e3, "queue_wait_ms": queue_wait_s * 1e3,
              **{f"{stage}_ms": float(value) for stage, value in zip(MODEL_STAGES, model_ms)},
              "total_ms": total_s * 1e3}
    return {**{name: round(value, 3) for name, value in timing.items()}, "sampling_steps": int(sampling_steps),
            "forward_examples": int(forward_examples)}
