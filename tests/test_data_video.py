"""Decoded frames match the generator's source pixels; the optional torchcodec backend, when absent, is a clear error."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from DiT4DiT.dataloader import DataError
from DiT4DiT.dataloader.video import decode_pyav, decode_torchcodec
from DiT4DiT.tools.tiny_robotwin import CAMERAS, DEFAULT_TASKS, render_frame

CODEC_TOLERANCE = 3.0  # mean absolute difference on 0..255 of h264 at crf 12


def _episode(root: Path, task: str, episode: int):
    table = pq.read_table(root / task / f"data/chunk-000/episode_{episode:06d}.parquet").to_pydict()
    return np.asarray(table["observation.state"]), np.asarray(table["timestamp"], dtype=np.float64)


def _video(root: Path, task: str, camera: str, episode: int) -> Path:
    return root / task / f"videos/chunk-000/observation.images.{camera}/episode_{episode:06d}.mp4"


@pytest.mark.parametrize("camera", CAMERAS)
def test_decoded_frames_match_the_encoded_ones(tiny_robotwin_root, camera):
    task, episode = "place_a2b_left", 1
    state, timestamps = _episode(tiny_robotwin_root, task, episode)
    position = DEFAULT_TASKS.index(task)
    wanted = np.array([0, 4, 11, 12, 19, len(state) - 1])
    frames = decode_pyav(_video(tiny_robotwin_root, task, camera, episode), timestamps[wanted], fps=15, episode=1)
    assert frames.shape == (len(wanted), 48, 64, 3) and frames.dtype == np.uint8
    source = np.stack([render_frame(camera, state[i], position, 48, 64) for i in wanted]).astype(float)
    error = np.abs(frames.astype(float) - source).mean(axis=(1, 2, 3))
    assert (error < CODEC_TOLERANCE).all(), error
    # The same frames compared with sources 4 steps later differ clearly: the check tells frames apart.
    later = np.stack([render_frame(camera, state[min(i + 4, len(state) - 1)], position, 48, 64) for i in wanted[:-1]])
    assert np.abs(frames[:-1].astype(float) - later).mean() > 1.5 * error[:-1].mean()


def test_unordered_and_repeated_timestamps(tiny_robotwin_root):
    state, timestamps = _episode(tiny_robotwin_root, "adjust_bottle", 0)
    path = _video(tiny_robotwin_root, "adjust_bottle", "cam_high", 0)
    picks = [20, 3, 3, 25]
    frames = decode_pyav(path, timestamps[picks], fps=15, episode=0)
    single = [decode_pyav(path, timestamps[[i]], fps=15, episode=0)[0] for i in picks]
    np.testing.assert_array_equal(frames, np.stack(single))


def test_timestamp_past_the_end_is_an_error(tiny_robotwin_root):
    _, timestamps = _episode(tiny_robotwin_root, "adjust_bottle", 0)
    path = _video(tiny_robotwin_root, "adjust_bottle", "cam_high", 0)
    with pytest.raises(DataError, match=r"no frame within 0\.0668s of timestamp .*nearest frame at"):
        decode_pyav(path, np.array([timestamps[-1] + 0.2]), fps=15, episode=0)


def test_torchcodec_absent_is_a_clear_error(tiny_robotwin_root, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torchcodec", None)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)
    with pytest.raises(DataError, match="pip install torchcodec or set datasets.vla_data.video_backend=pyav"):
        decode_torchcodec(_video(tiny_robotwin_root, "adjust_bottle", "cam_high", 0), np.array([0.0]), fps=15,
                          episode=0)
