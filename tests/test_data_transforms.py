"""Normalisers and their inverses; merged statistics equal the pooled ones."""

import numpy as np
import pytest

from DiT4DiT.dataloader import DataError, Normalizer
from DiT4DiT.dataloader.statistics import column_statistics, merge_statistics


def _stats(values):
    return {k: np.asarray(v) for k, v in column_statistics(values).items()}


@pytest.fixture
def values():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(500, 6)) * [1.0, 3.0, 0.5, 2.0, 1.0, 1.0] + [0.0, 1.0, -2.0, 5.0, 0.0, 0.0]
    data[:, 4] = 0.7  # a constant dim
    data[:, 5] = rng.integers(0, 2, size=500)  # a gripper
    return data


@pytest.mark.parametrize("mode", ["min_max", "q99", "mean_std"])
def test_unnormalize_inverts_normalize(values, mode):
    modes = [mode] * 5 + ["binary"]
    norm = Normalizer(modes, column_statistics(values))
    y = norm.normalize(values)
    back = norm.unnormalize(y)
    inside = np.ones(len(values), bool)
    if mode == "q99":  # q99 clips: exact only between the quantiles
        stats = _stats(values)
        inside = ((values[:, :5] >= stats["q01"][:5]) & (values[:, :5] <= stats["q99"][:5])).all(axis=1)
        assert inside.sum() > 400
        assert np.abs(y).max() <= 1.0
    np.testing.assert_allclose(back[inside, :5], values[inside, :5], atol=1e-9)
    np.testing.assert_array_equal(back[:, 5], values[:, 5])


def test_mode_formulas(values):
    stats = _stats(values)
    y = Normalizer(["min_max"] * 6, column_statistics(values)).normalize(values)
    expected = 2 * (values[:, 0] - stats["min"][0]) / (stats["max"][0] - stats["min"][0]) - 1
    np.testing.assert_allclose(y[:, 0], expected)
    assert y[:, 0].min() == -1.0 and y[:, 0].max() == 1.0
    assert (y[:, 4] == 0.0).all(), "min_max of a constant dim is 0"
    z = Normalizer(["mean_std"] * 6, column_statistics(values)).normalize(values)
    np.testing.assert_allclose(z[:, 1], (values[:, 1] - stats["mean"][1]) / stats["std"][1])
    assert (z[:, 4] == 0.7).all(), "mean_std keeps a zero-std dim raw"
    b = Normalizer(["binary"] * 6, column_statistics(values)).normalize(np.array([[0.2, 0.5, 0.51, 3, -1, 1]]))
    np.testing.assert_array_equal(b, [[0, 0, 1, 1, 0, 1]])


def test_unknown_mode_and_width_mismatch_are_errors(values):
    with pytest.raises(DataError, match="unknown normalisation mode"):
        Normalizer(["minmax"] * 6, column_statistics(values))
    with pytest.raises(DataError, match="differ in width"):
        Normalizer(["min_max"] * 4, column_statistics(values))


def test_merge_equals_pooled_statistics(values):
    a, b = values[:120], values[120:]
    merged = merge_statistics([(_stats(a), len(a)), (_stats(b), len(b))])
    pooled = _stats(values)
    for name in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(merged[name], pooled[name], atol=1e-9)
    # Pooled quantiles would need every row again: the merge widens to the parts' extreme quantiles.
    np.testing.assert_array_equal(merged["q01"], np.minimum(_stats(a)["q01"], _stats(b)["q01"]))
    np.testing.assert_array_equal(merged["q99"], np.maximum(_stats(a)["q99"], _stats(b)["q99"]))
