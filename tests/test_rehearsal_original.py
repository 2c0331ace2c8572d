"""bench/full_size_rehearsal.py --original: our training step and the original DiT4DiT's, timed on one batch.

The comparison itself runs with DIT4DIT_ORIGINAL set to a checkout of the original (DIT4DIT_ORIGINAL_PYTHON: an
interpreter its framework imports with, default this one). A folder that is no checkout, or one whose framework
does not import, is refused with one line and exit 2 before anything is written.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL_ENV = "DIT4DIT_ORIGINAL"


def rehearsal(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "bench/full_size_rehearsal.py", "--smoke", "--compare_only", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_a_folder_that_is_no_checkout_of_the_original_is_refused_with_one_line(tmp_path):
    work = tmp_path / "work"
    result = rehearsal("--original", str(tmp_path), "--workdir", str(work))
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"--original {tmp_path}: no DiT4DiT/model/framework/DiT4DiT.py there; pass a checkout of the original DiT4DiT "
        "(github.com/Mondo-Robotics/DiT4DiT)"]
    assert not work.exists()


def test_a_checkout_whose_framework_does_not_import_is_refused_naming_what_is_missing(tmp_path):
    checkout, work = tmp_path / "original", tmp_path / "work"
    framework = checkout / "DiT4DiT" / "model" / "framework"
    framework.mkdir(parents=True)
    for package in (checkout / "DiT4DiT", checkout / "DiT4DiT" / "model"):
        (package / "__init__.py").write_text("")
    (framework / "__init__.py").write_text("import a_module_this_environment_lacks\n")
    (framework / "DiT4DiT.py").write_text("")
    result = rehearsal("--original", str(checkout), "--workdir", str(work))
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"--original {checkout}: its framework does not import with ")
    assert "No module named 'a_module_this_environment_lacks'" in line and "--original_python" in line
    assert not work.exists()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(ORIGINAL_ENV),
                    reason=f"set {ORIGINAL_ENV} to a checkout of the original DiT4DiT to time it against ours")
def test_ours_and_the_original_train_the_same_parameters_on_one_batch_and_the_table_forms(tmp_path):
    """At the test size, one round. The training losses are not compared numerically: from one seed the two draw
    different noise (the original samples the VAE posterior of the zero-padded clip, every latent frame, where ours
    samples the conditioning frame's; its action head draws the noise before the time, ours the time first), so
    equal weights still give different losses; they must be finite, the trained tensors the same, and the action
    heads' sampled actions equal."""
    python = os.environ.get("DIT4DIT_ORIGINAL_PYTHON", sys.executable)
    result = rehearsal("--original", os.environ[ORIGINAL_ENV], "--original_python", python, "--rounds", "1",
                       "--workdir", str(tmp_path), "--min_available_gib", "0", timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ours, original = (json.loads((tmp_path / "compare" / f"round1_{side}.json").read_text())
                      for side in ("ours", "original"))
    for side in (ours, original):
        assert len(side["steps"]) == 2
        for step in side["steps"]:
            losses = [step[k] for k in ("action_loss", "future_video_loss", "total_loss")]
            assert all(math.isfinite(v) and v > 0 for v in losses), side
            assert step["step_s"] > 0 and step["cpu_s"] > 0 and step["major_faults"] >= 0
        assert side["peak_rss_gib"] >= side["rss_before_steps_gib"] > 0.1
    # Where the two must agree numerically: the action head, from the same weights, features, state and seed,
    # samples the same actions (float32; measured 6.4e-7 apart at the test size).
    assert ours["head_prediction"] and original["head_prediction"]
    assert np.allclose(ours["head_prediction"], original["head_prediction"], rtol=0, atol=1e-5)
    # The same frozen set: the same trained tensors by name, as the checkpoint contract has them.
    assert ours["trainable_names_sha256"] == original["trainable_names_sha256"]
    assert ours["trainable_parameters"] == original["trainable_parameters"] > 0
    rows = [line for line in result.stdout.splitlines() if line.startswith(("| 1 |", "| median |"))]
    assert len(rows) == 2 and "failed" not in "".join(rows), result.stdout[-3000:]
    assert "action head, same weights, seeded features and noise, float32: max |ours - original| = " in result.stdout
