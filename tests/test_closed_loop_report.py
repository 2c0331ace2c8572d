"""evaluation/closed_loop_report.py: what a closed-loop evaluation leaves behind (summary.json, plot, frame strip)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from DiT4DiT.evaluation.closed_loop_report import (STRIP_FRAMES, latency_summary, plot_outcomes, strip_frames,
                                                   write_frame_strip, write_summary)

PNG = b"\x89PNG\r\n\x1a\n"


def test_latency_is_summarised_in_milliseconds_and_absent_without_requests():
    assert latency_summary([]) is None
    summary = latency_summary([0.010, 0.020, 0.030])
    assert summary["requests"] == 3 and summary["median_ms"] == pytest.approx(20.0)
    assert summary["max_ms"] == pytest.approx(30.0) and summary["mean_ms"] == pytest.approx(20.0)


def test_the_summary_holds_the_rate_lengths_latency_and_speed(tmp_path):
    summary = write_summary(tmp_path, "metaworld", "reach-v3", [True, False, True, True], [40, 150, 60, 80],
                            latencies_s=[0.01], wall_s=30.0, policy="server")
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["successes"] == 3 and summary["episodes"] == 4
    assert summary["mean_length"] == 82.5 and summary["episodes_per_min"] == 8.0
    assert summary["policy"] == "server" and summary["latency"]["requests"] == 1


def test_the_plot_and_the_strip_are_pngs(tmp_path):
    plot_outcomes(tmp_path / "outcomes.png", [True, False], [10, 20], 30, "reach")
    frames = [np.full((16, 16, 3), i, np.uint8) for i in range(20)]
    assert len(strip_frames(frames)) == STRIP_FRAMES
    write_frame_strip(tmp_path / "frames.png", [frames, frames[:5]])
    assert (tmp_path / "outcomes.png").read_bytes()[:8] == PNG == (tmp_path / "frames.png").read_bytes()[:8]
