"""The tiny RoboTwin generator: layout, determinism, refusal to overwrite, the command line."""

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from DiT4DiT.host.output_paths import OutputError
from DiT4DiT.tools.tiny_robotwin import generate
from helpers.in_process import call_main



def _digests(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_and_meta(tiny_robotwin_root):
    task = tiny_robotwin_root / "adjust_bottle"
    info = json.loads((task / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 15 and info["total_episodes"] == 3
    assert info["features"]["observation.images.cam_high"]["info"]["video.codec"] == "h264"
    modality = json.loads((task / "meta/modality.json").read_text())
    assert modality["state"]["right_joints"] == {"start": 7, "end": 13}
    assert modality["annotation"] == {"human.action.task_description": {"original_key": "task_index"}}
    episodes = [json.loads(line) for line in (task / "meta/episodes.jsonl").read_text().splitlines()]
    table = pq.read_table(task / "data/chunk-000/episode_000001.parquet")
    assert table.num_rows == episodes[1]["length"] and 24 <= table.num_rows <= 40
    assert table.schema.field("observation.state").type.value_type == pa.float32()
    state, action = (np.asarray(table.column(c).to_pylist()) for c in ("observation.state", "action"))
    np.testing.assert_array_equal(action[:-1], state[1:])
    np.testing.assert_array_equal(action[-1], state[-1])
    assert state[:, [6, 13]].min() >= 0 and state[:, [6, 13]].max() <= 1
    assert info["total_frames"] == sum(e["length"] for e in episodes)


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    small = dict(tasks=["adjust_bottle"], episodes=1, frames=(6, 8))
    generate(tmp_path / "a", seed=3, **small)
    generate(tmp_path / "b", seed=3, **small)
    generate(tmp_path / "c", seed=4, **small)
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    assert _digests(tmp_path / "a") != _digests(tmp_path / "c")


def test_existing_folder_needs_overwrite(tmp_path):
    generate(tmp_path, tasks=["turn_switch"], episodes=1, frames=(4, 4))
    with pytest.raises(OutputError, match="--overwrite"):
        generate(tmp_path, tasks=["turn_switch"], episodes=1, frames=(4, 4))
    generate(tmp_path, tasks=["turn_switch"], episodes=1, frames=(5, 5), overwrite=True)
    assert json.loads((tmp_path / "turn_switch/meta/info.json").read_text())["total_frames"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["turn_switch"]


def test_command_line(tmp_path):
    from DiT4DiT.tools.tiny_robotwin import main

    def run(*args):
        return call_main(main, list(args), dict(os.environ))

    ok = run("--out", str(tmp_path), "--tasks", "stamp_seal", "--episodes", "1", "--min-frames", "4",
             "--max-frames", "4")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "stamp_seal/meta/info.json").is_file()
    bad = run("--out", str(tmp_path / "x"), "--height", "47")
    assert bad.returncode == 2 and "--height 47" in bad.stderr and not (tmp_path / "x").exists()
