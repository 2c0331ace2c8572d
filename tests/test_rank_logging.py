"""training/rank_logging.py: rank 0 logs everything; other ranks only what is rank-specific, tagged with their rank."""

from __future__ import annotations

import logging

from DiT4DiT.training.rank_logging import RANK_SPECIFIC, RankFilter


def record(specific: bool) -> logging.LogRecord:
    record = logging.LogRecord("dit4dit.train", logging.INFO, __file__, 1, "message", None, None)
    if specific:
        record.__dict__.update(RANK_SPECIFIC)
    return record


def test_rank_0_logs_everything_and_tags_only_rank_specific_records():
    rank0 = RankFilter(0, 2)
    shared, specific = record(False), record(True)
    assert rank0.filter(shared) and shared.rank_tag == ""
    assert rank0.filter(specific) and specific.rank_tag == "[rank 0] "


def test_other_ranks_log_only_rank_specific_records():
    rank1 = RankFilter(1, 2)
    assert not rank1.filter(record(False))
    specific = record(True)
    assert rank1.filter(specific) and specific.rank_tag == "[rank 1] "


def test_one_process_needs_no_tag():
    specific = record(True)
    assert RankFilter(0, 1).filter(specific) and specific.rank_tag == ""
