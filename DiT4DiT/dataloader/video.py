"""Decode the frames of one mp4 nearest to given timestamps, decoding only the stretch they lie in.

PyAV is the default backend (portable, aarch64 wheels); torchcodec is optional and imported lazily.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from DiT4DiT.dataloader.errors import DataError


def frame_tolerance(fps: float) -> float:
    """How far the nearest frame may lie from a requested timestamp.

    One frame period: the GR00T demo data (robot_sim.PickNPlace) stamp row i at (i+1)/fps while its videos
    start at 0, so the last row lies one period past the last frame. The nearest frame is still chosen;
    this only decides when no frame covers a timestamp at all.
    """
    return 1.0 / fps + 1e-4


def _missing_frame(path: Path, episode: int, wanted: float, found: float | None, tolerance: float) -> DataError:
    nearest = "no frame decoded" if found is None else f"nearest frame at {found:.4f}s"
    return DataError(
        f"{path}: episode {episode} has no frame within {tolerance:.4f}s of timestamp {wanted:.4f}s ({nearest}); "
        "the parquet 'timestamp' column and the video disagree, re-encode the video or fix the timestamps"
    )


def _open_error(path: Path, episode: int, exc: Exception) -> DataError:
    if not path.is_file():
        return DataError(f"{path}: video of episode {episode} is missing; restore it (info.json video_path names it)")
    return DataError(f"{path}: video of episode {episode} cannot be decoded ({exc}); re-encode or restore the file")


def decode_pyav(path: Path, timestamps: np.ndarray, *, fps: float, episode: int) -> np.ndarray:
    """(N, H, W, 3) uint8 frames nearest to `timestamps` (seconds): seek to the keyframe before the first, decode forward."""
    import av

    wanted = np.asarray(timestamps, dtype=np.float64)
    tolerance = frame_tolerance(fps)
    first = float(wanted.min())
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            # One decoding thread: DataLoader workers already use the cores; more threads oversubscribe them.
            stream.codec_context.thread_count = 1
            seek_to = max(first - tolerance, 0.0)
            chosen = _decode_nearest(container, stream, seek_to, wanted)
            earliest = min((hit[0] for hit in chosen if hit is not None), default=None)
            # A seek can land past the target in files with odd indexes; then decode from the start once.
            if seek_to > 0.0 and earliest is not None and earliest > first + tolerance:
                chosen = _decode_nearest(container, stream, 0.0, wanted)
    except av.error.FFmpegError as exc:
        raise _open_error(path, episode, exc) from exc
    frames = []
    for want, hit in zip(wanted, chosen):
        if hit is None or abs(hit[0] - want) > tolerance:
            raise _missing_frame(path, episode, float(want), None if hit is None else hit[0], tolerance)
        frames.append(hit[1])
    return np.stack(frames)


def _decode_nearest(container, stream, seek_to: float, wanted: np.ndarray) -> list[tuple[float, np.ndarray] | None]:
    """Decode forward from the keyframe before `seek_to`; each wanted timestamp gets the nearer of its two
    neighbouring frames, or the last frame if it lies past the end. Frames become arrays only when chosen."""
    from av.video.reformatter import VideoReformatter

    container.seek(int(seek_to / stream.time_base), stream=stream, backward=True, any_frame=False)
    order = np.argsort(wanted, kind="stable")
    chosen: list[tuple[float, np.ndarray] | None] = [None] * len(wanted)
    arrays: dict[float, np.ndarray] = {}
    # One converter for the whole call: a new colour-conversion context per frame costs more than the conversion.
    to_rgb = VideoReformatter()

    def pick(time: float, frame) -> tuple[float, np.ndarray]:
        if time not in arrays:
            arrays[time] = to_rgb.reformat(frame, format="rgb24").to_ndarray()
        return time, arrays[time]

    cursor = 0
    previous = None
    for frame in container.decode(stream):
        if frame.time is None:
            continue
        now = float(frame.time)
        while cursor < len(order) and now >= wanted[order[cursor]]:
            want = wanted[order[cursor]]
            if previous is not None and want - previous[0] < now - want:
                chosen[order[cursor]] = pick(*previous)
            else:
                chosen[order[cursor]] = pick(now, frame)
            cursor += 1
        if cursor == len(order):
            return chosen
        previous = (now, frame)
    if previous is not None:
        for index in order[cursor:]:
            chosen[index] = pick(*previous)
    return chosen


def decode_torchcodec(path: Path, timestamps: np.ndarray, *, fps: float, episode: int) -> np.ndarray:
    """Same contract as `decode_pyav`, through torchcodec (optional dependency)."""
    try:
        from torchcodec.decoders import VideoDecoder
    except ImportError as exc:
        raise DataError("datasets.vla_data.video_backend=torchcodec, but torchcodec is not installed; "
                        "pip install torchcodec or set datasets.vla_data.video_backend=pyav") from exc
    wanted = np.asarray(timestamps, dtype=np.float64)
    tolerance = frame_tolerance(fps)
    try:
        decoder = VideoDecoder(str(path), dimension_order="NHWC", num_ffmpeg_threads=1)
        begin = float(decoder.metadata.begin_stream_seconds or 0.0)
        end = float(decoder.metadata.end_stream_seconds)
        # "Played at" picks the frame on screen at t; shifting by half a period makes that the nearest frame.
        query = np.clip(wanted + 0.5 / fps, begin, np.nextafter(end, begin))
        batch = decoder.get_frames_played_at(seconds=query.tolist())
    except (RuntimeError, ValueError) as exc:
        raise _open_error(path, episode, exc) from exc
    times = batch.pts_seconds.numpy().astype(np.float64)
    for want, got in zip(wanted, times):
        if abs(got - want) > tolerance:
            raise _missing_frame(path, episode, float(want), float(got), tolerance)
    return batch.data.numpy()


def frame_decoder(backend: str):
    """The decode function of `datasets.vla_data.video_backend` (its names are checked when the config loads)."""
    return {"pyav": decode_pyav, "torchcodec": decode_torchcodec}[backend]
