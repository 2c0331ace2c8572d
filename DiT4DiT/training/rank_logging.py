"""Logging for many processes: train.log holds each message once, rank-tagged where it is rank-specific.

Rank 0 logs everything; the other ranks log only records marked rank-specific (`extra=RANK_SPECIFIC`), which
carry "[rank r]" in a multi-process run. Python warnings go through the same filter, so a warning every rank
raises appears once. The rank comes from the launcher's environment, so this works before the Accelerator exists.
"""

from __future__ import annotations

import logging
import os

from DiT4DiT import logging_setup

RANK_SPECIFIC = {"rank_specific": True}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(rank_tag)s%(message)s"


class RankFilter(logging.Filter):
    def __init__(self, rank: int, world: int):
        super().__init__()
        self.rank, self.world = rank, world

    def filter(self, record: logging.LogRecord) -> bool:
        specific = getattr(record, "rank_specific", False)
        record.rank_tag = f"[rank {self.rank}] " if specific and self.world > 1 else ""
        return self.rank == 0 or specific


def configure_logging(level: int = logging.INFO) -> None:
    """The entry points' logging set-up through the rank filter (RANK / WORLD_SIZE as torchrun and accelerate
    launch set them), Python warnings included."""
    logging_setup.configure_logging(level, FORMAT, (RankFilter(int(os.environ.get("RANK", 0)),
                                                               int(os.environ.get("WORLD_SIZE", 1))),))
    logging.captureWarnings(True)
