"""Open-loop plots: predicted against recorded actions per joint over an episode, and per-joint errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # evaluation hosts have no display
    import matplotlib.pyplot as plt

    return plt


def plot_episode(predicted: np.ndarray, recorded: np.ndarray, joint_names: list[str], chunk: int, title: str,
                 path: Path) -> Path:
    """One panel per joint: recorded (grey) and predicted (blue) over time; dotted lines where a new chunk starts."""
    plt = _pyplot()
    joints = predicted.shape[1]
    columns = min(4, joints)
    rows = math.ceil(joints / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.2 * rows), dpi=100, squeeze=False,
                             sharex=True)
    steps = np.arange(len(predicted))
    for joint, ax in enumerate(axes.flat):
        if joint >= joints:
            ax.axis("off")
            continue
        ax.plot(steps, recorded[:, joint], color="0.45", linewidth=1.6, label="recorded")
        ax.plot(steps, predicted[:, joint], color="tab:blue", linewidth=1.1, label="predicted")
        for start in range(chunk, len(predicted), chunk):
            ax.axvline(start, color="0.85", linestyle=":", linewidth=0.8, zorder=0)
        ax.set_title(joint_names[joint], fontsize=8)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.supxlabel("step (a new chunk is predicted at each dotted line)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_joint_errors(mse: np.ndarray, mae: np.ndarray, joint_names: list[str], path: Path) -> Path:
    """Bars of per-joint MSE and MAE over every evaluated step."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(mse)), 3.2), dpi=100)
    positions = np.arange(len(mse))
    ax.bar(positions - 0.2, mse, width=0.4, label="MSE")
    ax.bar(positions + 0.2, mae, width=0.4, label="MAE")
    ax.set_xticks(positions, joint_names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("error (robot units)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
