"""trainer.profile_steps: a trace of the chosen steps in the run folder and their top operators in the log, on CPU
(torch.profiler; the NPU patch's torch_npu.profiler is tested with the patched tree, tests/test_npu_patch.py)."""

from __future__ import annotations

import json
import re

import pytest

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.schema import load_config
from DiT4DiT.training.profiler import OperatorRow, ascend_rows, table_lines
from helpers.training_runs import TINY_CONFIG, train_in_process


def test_a_cpu_run_writes_the_trace_and_logs_the_table(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path, "profiled", "--trainer.max_train_steps=4",
                              "--trainer.profile_steps=2,3", "--trainer.logging_frequency=1")
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "profiled" / "profile"
    (trace,) = folder.glob("rank0.*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")} == {"ProfilerStep#1",
                                                                                        "ProfilerStep#2"}
    table = json.loads((folder / "top_operators.json").read_text())
    assert table["steps"] == [2, 3] and 5 <= len(table["rows"]) <= 20
    shares = [row["share"] for row in table["rows"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1.0
    assert any(row["name"].startswith("aten::") for row in table["rows"])
    assert not any(row["name"].startswith("ProfilerStep") for row in table["rows"])
    logged = result.stderr[result.stderr.index("top operators of steps 2-3 by self time:"):]
    first = table["rows"][0]
    assert re.search(rf"{first['self_ms']:.1f}\s+{first['calls']}\s+{first['share']:.1%}\s+{re.escape(first['name'])}",
                     logged)


def test_a_run_resumed_after_the_steps_profiles_nothing(tmp_path):
    from DiT4DiT.training.profiler import NoProfiler, step_profiler

    with step_profiler(None, "2,3", 5, tmp_path, 0, True, "cpu") as profiler:
        assert isinstance(profiler, NoProfiler)
    assert not (tmp_path / "profile").exists()


def test_the_npu_table_comes_from_op_statistic(tmp_path):
    """torch_npu.profiler's ASCEND_PROFILER_OUTPUT/op_statistic.csv (its columns) gives the rows, by total time."""
    out = tmp_path / "rank0_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "op_statistic.csv").write_text(
        "OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "MatMulV2,AI_CORE,560,30000.5,10,53.6,90,60.0\n"
        "FlashAttentionScore,AI_CORE,56,15000,200,267.9,300,30.0\n"
        "Conv3D,AI_CORE,10,5000,400,500,600,10.0\n")
    rows = ascend_rows(tmp_path)
    assert rows == [OperatorRow("MatMulV2 (AI_CORE)", 30.0, 560, 0.6), OperatorRow("FlashAttentionScore (AI_CORE)",
                                                                                   15.0, 56, 0.3),
                    OperatorRow("Conv3D (AI_CORE)", 5.0, 10, 0.1)]
    assert table_lines(rows, (3, 5))[2].split() == ["30.0", "560", "60.0%", "MatMulV2", "(AI_CORE)"]


@pytest.mark.parametrize("value, words", [("ten", "give the first and last optimizer step to profile"),
                                          ("5,3", "the first comes first"),
                                          ("90,120", "the run ends at step 100")])
def test_steps_the_run_cannot_profile_are_refused(value, words):
    with pytest.raises(ConfigError, match=words):
        load_config(TINY_CONFIG, [f"trainer.profile_steps={value}"])
