"""Multi-node runs need one run directory that every node sees: checked once at start-up.

Global rank 0 writes a marker with a fresh token under `run_root_dir`; after that, the first process of
every node looks for the marker and compares the token. The outcome is gathered on every rank, so all ranks
stop together with the same message (no rank waits forever in a collective for a node that gave up). A
node-local disk at the same path fails the check even when an older marker is lying there.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import torch.distributed as dist

from DiT4DiT.config.schema import ConfigError


def nodes_in_world() -> int:
    """Number of nodes of a torchrun-launched world (1 when not launched that way)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    return max(1, world // max(1, local_world))


def check_shared_run_dir(accelerator, run_root_dir: str | Path) -> None:
    """ConfigError on every rank when some node does not see what global rank 0 wrote under run_root_dir."""
    if not dist.is_initialized() or nodes_in_world() == 1:
        return
    root = Path(run_root_dir)
    token = [uuid.uuid4().hex if accelerator.is_main_process else None]
    dist.broadcast_object_list(token, src=0)
    marker = root / f".dit4dit-shared-{token[0]}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        marker.write_text(token[0])
    accelerator.wait_for_everyone()
    seen = None
    if accelerator.is_local_main_process:
        seen = marker.is_file() and marker.read_text() == token[0]
    outcomes: list[tuple[str, bool | None] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(outcomes, (socket.gethostname(), seen))
    if accelerator.is_main_process:
        marker.unlink()
    blind = sorted({host for host, ok in outcomes if ok is False})
    if blind:
        raise ConfigError(
            f"run_root_dir {root.resolve()} is not shared by all nodes: {', '.join(blind)} cannot see the marker "
            f"that global rank 0 ({outcomes[0][0]}) wrote there. Put run_root_dir on a filesystem every node mounts "
            f"at the same path (--run_root_dir=/shared/runs)"
        )
