"""Do the ranks end with the same weights? Compared on the host, byte for byte, after the final model is written.

A device-side sum is no test of equality: on Ascend A2/A3 `torch.sum` is non-deterministic unless deterministic
mode is on (Ascend/pytorch docs/zh/native_apis/deterministic_computing_apis.md), so identical replicas can sum
to values that differ in the last bits. Each rank hashes the bytes of every trainable tensor copied to the host
instead: identical weights always give equal digests, and any differing bit gives a different one. A difference
is a bug (the replicas should be bit-identical under DDP and ZeRO-1/2), but the run's work is kept: the final
model (rank 0's weights) is already written when the ranks are compared, and the difference is a loud warning
naming the ranks and tensors.
"""

from __future__ import annotations

import hashlib

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

DIGEST_BYTES = 8
LISTED = 5  # differing tensors named per rank in the warning; the rest are counted


def tensor_digest(tensor: torch.Tensor) -> str:
    """A hash of the tensor's bytes on the host (its dtype and shape included, so a reshaped copy differs)."""
    host = tensor.detach().cpu().contiguous().reshape(-1)
    digest = hashlib.blake2b(f"{host.dtype}{tuple(tensor.shape)}".encode(), digest_size=DIGEST_BYTES)
    digest.update(host.view(torch.uint8).numpy())  # the buffer itself, not a copy
    return digest.hexdigest()


def trainable_digests(model: torch.nn.Module) -> dict[str, str]:
    return {name: tensor_digest(p) for name, p in model.named_parameters() if p.requires_grad}


def replica_digest(digests: dict[str, str]) -> str:
    """One digest of a rank's whole set of trainable tensors (the value the metrics record carries)."""
    whole = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for name in sorted(digests):
        whole.update(f"{name}={digests[name]};".encode())
    return whole.hexdigest()


def sharded(model: torch.nn.Module) -> bool:
    """ZeRO-3 keeps each weight once, split over the ranks: there are no replicas to compare."""
    return any(hasattr(p, "ds_tensor") for p in model.parameters())


def differences(per_rank: list[dict[str, str]]) -> list[str]:
    """One line per rank whose tensors differ from rank 0's, naming them; [] when all ranks agree."""
    reference, lines = per_rank[0], []
    for rank, digests in enumerate(per_rank[1:], start=1):
        names = sorted(n for n in reference.keys() | digests.keys() if reference.get(n) != digests.get(n))
        if names:
            more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
            lines.append(f"rank {rank} differs from rank 0 in {len(names)} of {len(reference)} tensor(s): "
                         f"{', '.join(names[:LISTED])}{more}")
    return lines


def compare_replicas(accelerator: Accelerator, model: torch.nn.Module) -> tuple[list[str], list[str]]:
    """Collective: (each rank's replica digest, the lines naming differing ranks and tensors)."""
    per_rank = gather_object([trainable_digests(model)])
    return [replica_digest(d) for d in per_rank], differences(per_rank)
