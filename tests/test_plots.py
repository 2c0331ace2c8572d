"""evaluation/plots.py: the open-loop plots are PNG files, whatever the number of joints."""

from __future__ import annotations

import numpy as np
import pytest

from DiT4DiT.evaluation.plots import plot_episode, plot_joint_errors

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("joints", [1, 5])
def test_an_episode_plot_has_a_panel_per_joint(tmp_path, joints):
    rng = np.random.default_rng(0)
    predicted, recorded = rng.normal(size=(30, joints)), rng.normal(size=(30, joints))
    path = plot_episode(predicted, recorded, [f"j{i}" for i in range(joints)], 8, "episode 0", tmp_path / "e.png")
    assert path.read_bytes()[:8] == PNG


def test_the_joint_errors_are_one_png(tmp_path):
    path = plot_joint_errors(np.array([0.1, 0.2]), np.array([0.3, 0.1]), ["a", "b"], tmp_path / "errors.png")
    assert path.read_bytes()[:8] == PNG
