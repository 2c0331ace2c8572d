"""What a closed-loop evaluation leaves behind: summary.json, a success/length plot and a frame strip of episodes.

numpy, Pillow and matplotlib only, so it runs in the simulator environments, which have no torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.evaluation.summary import task_result

STRIP_FRAMES = 8  # frames per episode row of the strip


def latency_summary(latencies_s: list[float]) -> dict | None:
    """Request latency in milliseconds (None without requests: the zero and random policies make none)."""
    if not latencies_s:
        return None
    ms = np.asarray(latencies_s) * 1000.0
    return {"requests": int(ms.size), "median_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95)),
            "mean_ms": float(ms.mean()), "max_ms": float(ms.max())}


def write_summary(out: Path, suite: str, task: str, outcomes: list[bool], lengths: list[int], *,
                  latencies_s: list[float], wall_s: float, **details) -> dict:
    """<out>/summary.json: the adapters' task result (rate, 95% interval, outcomes) plus lengths, latency, speed."""
    summary = {**task_result(suite, task, outcomes), "episode_lengths": [int(n) for n in lengths],
               "mean_length": float(np.mean(lengths)) if lengths else 0.0,
               "latency": latency_summary(latencies_s), "wall_s": round(wall_s, 2),
               "episodes_per_min": round(60.0 * len(outcomes) / wall_s, 1) if wall_s > 0 else None, **details}
    write_json_atomic(Path(out) / "summary.json", summary)
    return summary


def plot_outcomes(path: Path, outcomes: list[bool], lengths: list[int], max_steps: int, title: str) -> None:
    """Bars of episode length, green for a success and red for a failure, with the step budget as a line."""
    import matplotlib

    matplotlib.use("Agg")  # evaluation hosts have no display
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(max(4.0, 0.12 * len(lengths) + 2.0), 3.0))
    colours = ["tab:green" if won else "tab:red" for won in outcomes]
    axis.bar(np.arange(len(lengths)), lengths, color=colours, width=0.8)
    axis.axhline(max_steps, color="grey", linestyle="--", linewidth=1)
    rate = sum(outcomes) / max(len(outcomes), 1)
    axis.set(xlabel="episode", ylabel="steps", title=f"{title}: {sum(outcomes)}/{len(outcomes)} ({rate:.0%}) succeed")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def strip_frames(frames: list[np.ndarray]) -> list[np.ndarray]:
    """STRIP_FRAMES of an episode's frames spread evenly from its first to its last step (all of fewer)."""
    if not frames:
        return []
    picks = np.linspace(0, len(frames) - 1, num=min(STRIP_FRAMES, len(frames))).round().astype(int)
    return [frames[i] for i in picks]


def write_frame_strip(path: Path, episodes: list[list[np.ndarray]]) -> None:
    """One row per episode of its `strip_frames`."""
    rows = []
    for frames in episodes:
        row = np.concatenate(strip_frames(frames), axis=1)
        width = frames[0].shape[1] * STRIP_FRAMES
        rows.append(np.pad(row, ((0, 0), (0, width - row.shape[1]), (0, 0))))
    Image.fromarray(np.concatenate(rows, axis=0)).save(path)
