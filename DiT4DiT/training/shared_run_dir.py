"""Multi-node runs need one run directory that every node sees: checked once at start-up.

Global rank 0 writes a marker holding a fresh random token under `run_root_dir`; after a barrier, the first
process of every node reads it back. The outcome is gathered on every rank, so all ranks stop together with
the same message (none waits forever in a collective for a node that gave up). A node-local disk at the same
path fails even when an older marker is lying there, because the token is new.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from DiT4DiT.config.schema import ConfigError

if TYPE_CHECKING:
    from accelerate import Accelerator

SEES, BLIND, NOT_ASKED = 1, 0, -1
# Tensors handed to collectives stay referenced for the life of the process: a refusal here ends the group on
# the error path, without the last barrier that keeps gloo's workers from freeing them (process_group.py).
_HANDED_TO_COLLECTIVES: list[torch.Tensor] = []


def nodes_in_world() -> tuple[int, int]:
    """(nodes, processes per node) of a torchrun-launched world; (1, world) when not launched that way."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    return max(1, world // local_world), local_world


def _collective_tensor(values: list[int], device: torch.device) -> torch.Tensor:
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    _HANDED_TO_COLLECTIVES.append(tensor)
    return tensor


def check_shared_run_dir(accelerator: Accelerator, run_root_dir: str | Path) -> None:
    """ConfigError on every rank when some node does not see what global rank 0 wrote under run_root_dir."""
    nodes, per_node = nodes_in_world()
    if not dist.is_initialized() or nodes == 1:
        return
    root = Path(run_root_dir)
    token = _collective_tensor([secrets.randbits(62) if accelerator.is_main_process else 0], accelerator.device)
    dist.broadcast(token, src=0)
    marker = root / f".dit4dit-shared-{token.item():x}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(token.item()))
    accelerator.wait_for_everyone()
    seen = NOT_ASKED
    if accelerator.is_local_main_process:
        seen = SEES if marker.is_file() and marker.read_text() == str(token.item()) else BLIND
    mine = _collective_tensor([seen], accelerator.device)
    everyone = [_collective_tensor([NOT_ASKED], accelerator.device) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    if accelerator.is_main_process:
        marker.unlink()
    blind = [rank // per_node for rank, outcome in enumerate(everyone) if outcome.item() == BLIND]
    if blind:
        here = f" (this is {socket.gethostname()})" if seen == BLIND else ""
        raise ConfigError(
            f"run_root_dir {root.resolve()} is not shared by all nodes: machine rank(s) {', '.join(map(str, blind))} "
            f"cannot see the marker that global rank 0 wrote there{here}. Put run_root_dir on a filesystem every "
            "node mounts at the same path (--run_root_dir=/shared/runs)"
        )
