"""Two "nodes" on this machine: two runs of scripts/train_8p.sh (machine_rank 0 and 1, one CPU process each,
gloo) form one world of two processes, train, and resume; a run dir that one node cannot see stops both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from DiT4DiT.training import checkpoint as ckpt
from helpers.cli_runs import free_port

pytestmark = pytest.mark.slow  # two launchers, each with accelerate launch

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "scripts" / "train_8p.sh"
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"


def launch_two_nodes(common: list[str], per_node: dict[int, list[str]] | None = None) -> list[subprocess.CompletedProcess]:
    """Both launchers at once, as a scheduler would start them; (returncode, stdout, stderr) per machine rank."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d != str(FAKE_BIN) and not (Path(d) / "npu-smi").exists()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "DIT4DIT_", "MASTER_", "SLURM_"))}
    env.update(PYTHON=sys.executable, PATH=os.pathsep.join([str(Path(sys.executable).parent), *path]))
    port = free_port()
    procs = [
        subprocess.Popen(["bash", str(LAUNCHER), "--num_machines=2", f"--machine_rank={rank}", "--num_processes=1",
                          "--main_process_ip=127.0.0.1", f"--main_process_port={port}", "--net_if=lo",
                          *common, *(per_node or {}).get(rank, [])],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def steps_logged(run_dir: Path) -> list[int]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if "total_loss" in r]


def test_two_launchers_train_as_one_world_and_resume(tmp_path, tiny_pipeline_dir, tiny_robotwin_root):
    runs = tmp_path / "runs"
    common = [f"--base_model={tiny_pipeline_dir}", f"--data_root_dir={tiny_robotwin_root}", f"--run_root_dir={runs}",
              "--run_id=two_nodes", "--per_device_batch_size=2", "--trainer.save_interval=3",
              "--trainer.num_warmup_steps=1", "--trainer.logging_frequency=1", "--trainer.eval_interval=3"]
    first = launch_two_nodes([*common, "--max_train_steps=3"])
    run_dir = runs / "two_nodes"
    for result in first:
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    log0, log1 = (run_dir / "train.log").read_text(), (run_dir / "train.node1.log").read_text()
    assert "2 process(es)" in log0 and log0.rstrip().endswith("=== exit code 0")
    assert "--num_processes 2 --num_machines 2 --machine_rank 1" in log1 and log1.rstrip().endswith("=== exit code 0")
    states = ckpt.completed_states(run_dir / "checkpoints")
    assert ckpt.read_trainer_state(states[-1]) ["num_processes"] == 2 and ckpt.read_trainer_state(states[-1])["step"] == 3
    assert steps_logged(run_dir) == [1, 2, 3]

    resumed = launch_two_nodes([*common, "--max_train_steps=5", "--trainer.save_interval=5", "--trainer.is_resume=true"])
    for result in resumed:
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "steps 3 -> 5" in (run_dir / "train.log").read_text()
    assert steps_logged(run_dir) == [1, 2, 3, 4, 5]
    assert ckpt.read_trainer_state(ckpt.completed_states(run_dir / "checkpoints")[-1])["step"] == 5


def test_a_run_dir_one_node_cannot_see_stops_every_rank(tmp_path, tiny_pipeline_dir, tiny_robotwin_root):
    # Node 1 gets another folder for the same path: what a node-local disk looks like.
    common = [f"--base_model={tiny_pipeline_dir}", f"--data_root_dir={tiny_robotwin_root}", "--run_id=split",
              "--max_train_steps=3", "--trainer.save_interval=3"]
    results = launch_two_nodes(common, {0: [f"--run_root_dir={tmp_path / 'node0'}"], 1: [f"--run_root_dir={tmp_path / 'node1'}"]})
    for result in results:
        assert result.returncode != 0
    log = (tmp_path / "node0" / "split" / "train.log").read_text()
    assert f"config error: run_root_dir {tmp_path / 'node0'} is not shared by all nodes" in log
    assert "machine rank(s) 1 cannot see the marker that global rank 0 wrote there" in log
    assert not (tmp_path / "node0" / "split" / "checkpoints").exists()
    assert not list((tmp_path / "node0").glob(".dit4dit-shared-*"))
