"""A tool's --out is a file (or folder) the tool creates or replaces, nothing else: a device node, a FIFO, the
wrong kind of entry, a folder the tool did not write (with --overwrite: no .written_by naming it, a recorded
LeRobot dataset included) and a path inside a dataset or a run folder it does not own are refused in one line
(exit 2), and what was there is left as it was (the rule: host/output_paths.py).

Device nodes are made by the test under its temporary folder (as root; skipped where mknod is not permitted).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from DiT4DiT.evaluation import open_loop
from DiT4DiT.dataloader.layout import is_dataset
from DiT4DiT.tools import (export_checkpoint, full_size_cosmos, modality, tiny_cosmos, tiny_dataset,
                           tiny_robotwin)
from helpers.fixtures_data import PICKNPLACE

ROOT = Path(__file__).resolve().parents[1]


def device(tmp: Path) -> Path:
    path = tmp / "null"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("mknod is not permitted here (not root)")
    return path


def fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "pipe")
    return tmp / "pipe"


def folder(tmp: Path) -> Path:
    (tmp / "folder").mkdir()
    return tmp / "folder"


def regular_file(tmp: Path) -> Path:
    (tmp / "file").write_text("mine")
    return tmp / "file"


def foreign_folder(tmp: Path) -> Path:
    """A folder of someone else's files, which --overwrite must not delete."""
    (tmp / "home").mkdir()
    (tmp / "home" / "thesis.tex").write_text("years of work")
    return tmp / "home"


def run_dir(tmp: Path) -> Path:
    run = tmp / "runs" / "other"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("run_id: other\n")
    return run / "exported.pt"


def dataset(tmp: Path) -> Path:
    return tmp / "dataset" / "meta" / "modality.json"


def in_dataset_file(tmp: Path) -> Path:
    return tmp / "dataset" / "exported.pt"


def in_dataset_folder(tmp: Path) -> Path:
    return tmp / "dataset" / "generated"


@dataclass(frozen=True)
class Out:
    name: str
    tool: Callable[[list[str]], int]
    args: tuple[str, ...]  # "{out}" is the target, "{tmp}" the temporary folder
    target: Callable[[Path], Path]
    words: tuple[str, ...]

    def __str__(self) -> str:
        return self.name


CHECKPOINT = "{tmp}/runs/mine/final_model/pytorch_model.pt"
ROWS = [
    Out("modality to a device node", modality.main, ("{tmp}/dataset", "--data_config", "robotwin", "--out", "{out}"), device,
        ("--out", "null is a character device", "must be a regular file or a new path")),
    Out("modality to a FIFO", modality.main, ("{tmp}/dataset", "--data_config", "robotwin", "--out", "{out}"), fifo,
        ("pipe is a FIFO",)),
    Out("modality to a folder", modality.main, ("{tmp}/dataset", "--data_config", "robotwin", "--out", "{out}"), folder,
        ("folder is a folder", "must be a regular file")),
    Out("modality into its dataset", modality.main, ("{tmp}/dataset", "--data_config", "robotwin", "--out", "{out}"), dataset,
        ("lies inside the LeRobot dataset", "does not write into")),
    Out("modality into a run folder", modality.main, ("{tmp}/dataset", "--data_config", "robotwin", "--out", "{out}"), run_dir,
        ("lies inside the training run folder", "other")),
    Out("export over a device node", export_checkpoint.main, (CHECKPOINT, "--out", "{out}", "--overwrite"), device,
        ("null is a character device",)),
    Out("export over a FIFO", export_checkpoint.main, (CHECKPOINT, "--out", "{out}", "--overwrite"), fifo, ("is a FIFO",)),
    Out("export over a folder", export_checkpoint.main, (CHECKPOINT, "--out", "{out}", "--overwrite"), folder,
        ("is a folder",)),
    Out("export into another run", export_checkpoint.main, (CHECKPOINT, "--out", "{out}"), run_dir,
        ("lies inside the training run folder", "runs/other")),
    Out("export into a dataset", export_checkpoint.main, (CHECKPOINT, "--out", "{out}"), in_dataset_file,
        ("lies inside the LeRobot dataset",)),
    Out("tiny_cosmos to a device node", tiny_cosmos.main, ("--out", "{out}", "--overwrite"), device,
        ("null is a character device", "must be a folder")),
    Out("tiny_cosmos to a file", tiny_cosmos.main, ("--out", "{out}", "--overwrite"), regular_file,
        ("file is a regular file", "must be a folder")),
    Out("tiny_cosmos over a folder it did not write", tiny_cosmos.main, ("--out", "{out}", "--overwrite"), foreign_folder,
        ("holds 1 entry (thesis.tex) but no .written_by naming tiny_cosmos", "will not delete it")),
    Out("tiny_cosmos into a dataset", tiny_cosmos.main, ("--out", "{out}"), in_dataset_folder,
        ("lies inside the LeRobot dataset",)),
    Out("tiny_dataset to a device node", tiny_dataset.main, ("--data_config", "robotwin", "--out", "{out}", "--overwrite"),
        device, ("null is a character device", "must be a folder")),
    Out("tiny_dataset to a FIFO", tiny_dataset.main, ("--data_config", "robotwin", "--out", "{out}", "--overwrite"), fifo,
        ("pipe is a FIFO",)),
    Out("tiny_dataset over a folder it did not write", tiny_dataset.main,
        ("--data_config", "robotwin", "--out", "{out}", "--overwrite"), foreign_folder,
        ("holds 1 entry (thesis.tex) but no .written_by naming tiny_dataset", "will not delete it")),
    Out("tiny_dataset into a dataset", tiny_dataset.main, ("--data_mix", "robotwin", "--out", "{out}"), in_dataset_folder,
        ("lies inside the LeRobot dataset",)),
    Out("tiny_robotwin to a file", tiny_robotwin.main, ("--out", "{out}"), regular_file,
        ("file is a regular file", "must be a folder")),
    Out("tiny_robotwin into a run folder", tiny_robotwin.main, ("--out", "{out}"), run_dir,
        ("lies inside the training run folder",)),
    # --cache_dir is checked before the checkpoint is read (none is at --ckpt): the cache is written into
    *(Out(f"open_loop cache_dir {name}", open_loop.main, ("--ckpt", "{tmp}/run.pt", "--data_mix", "{tmp}/dataset",
          "--out", "{tmp}/eval", "--device", "cpu", "--cache_dir", "{out}"), target, ("error: --cache_dir", *words))
      for name, target, words in (("a file", regular_file, ("file is a regular file", "must be a folder")),
                                  ("a device node", device, ("null is a character device",)),
                                  ("in the dataset", in_dataset_folder, ("lies inside the LeRobot dataset",)),
                                  ("in a run folder", run_dir, ("lies inside the training run folder",)))),
]


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under `root` with its type and (regular files) content; FIFOs and devices are never opened."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        found[str(path)] = (stat.S_IFMT(mode), path.read_bytes() if stat.S_ISREG(mode) else None)
    return found


@pytest.mark.parametrize("case", ROWS, ids=str)
def test_an_output_that_is_not_ours_to_replace_is_refused(case, tiny_robotwin_root, tmp_path, capsys):
    shutil.copytree(tiny_robotwin_root / "adjust_bottle", tmp_path / "dataset")
    out = case.target(tmp_path)
    before = snapshot(tmp_path)
    capsys.readouterr()
    code = case.tool([arg.replace("{out}", str(out)).replace("{tmp}", str(tmp_path)) for arg in case.args])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    missing = [word for word in case.words if word not in lines[0]]
    assert not missing, f"{missing} not in: {lines[0]}"
    assert snapshot(tmp_path) == before


def test_a_new_path_and_a_regular_file_are_written(tiny_robotwin_root, tmp_path, capsys):
    shutil.copytree(tiny_robotwin_root / "adjust_bottle", tmp_path / "dataset")
    for out in (tmp_path / "new.json", regular_file(tmp_path)):
        assert modality.main([str(tmp_path / "dataset"), "--data_config", "robotwin", "--out", str(out)]) == 0
        assert out.read_text().startswith("{")


# Each tool that writes a folder, with --overwrite onto "{out}" (tiny_robotwin: the task folder {name} under
# {parent}), the name its .written_by marker holds, and its refusal of a dataset at "{out}": the dataset tools
# find no marker; the pipeline tools do not write into a dataset at all.
NO_MARKER = "--out {out} holds a LeRobot dataset (meta/info.json) but no .written_by naming {marker}: not a folder " \
            "this tool wrote, so --overwrite will not delete it; give another --out or delete it yourself"
IN_DATASET = "--out {out} lies inside the LeRobot dataset {out} (meta/info.json there)"
OVERWRITERS = {
    "tiny_dataset": (tiny_dataset.main, ("--data_config", "robotwin", "--out", "{out}", "--episodes", "1",
                                         "--min-frames", "4", "--max-frames", "4"), "tiny_dataset", NO_MARKER),
    "tiny_robotwin": (tiny_robotwin.main, ("--out", "{parent}", "--tasks", "{name}", "--episodes", "1",
                                           "--min-frames", "4", "--max-frames", "4"), "tiny_dataset", NO_MARKER),
    "full_size_cosmos": (full_size_cosmos.main, ("--out", "{out}", "--size", "test"), "full_size_cosmos", IN_DATASET),
    "tiny_cosmos": (tiny_cosmos.main, ("--out", "{out}"), "tiny_cosmos", IN_DATASET),
}


def overwrite(tool: str, out: Path, *extra: str) -> int:
    main, args, _, _ = OVERWRITERS[tool]
    fill = {"{out}": str(out), "{parent}": str(out.parent), "{name}": out.name}
    return main([fill.get(arg, arg) for arg in args] + ["--overwrite", *extra])


@pytest.mark.parametrize("tool", OVERWRITERS)
def test_overwrite_leaves_a_recorded_dataset_byte_identical(tool, tmp_path, capsys):
    # The dataset tools replaced any folder holding meta/info.json: --overwrite pointed at a user's recorded
    # demonstrations deleted them. Nothing marks a folder recorded elsewhere as the tool's, so it is refused.
    out = tmp_path / "data" / "my_demos"
    shutil.copytree(PICKNPLACE, out)
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert overwrite(tool, out) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    _, _, marker, refusal = OVERWRITERS[tool]
    assert refusal.format(out=out, marker=marker) in line
    assert snapshot(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["tiny_dataset", "full_size_cosmos"])
def test_overwrite_replaces_a_folder_the_tool_wrote(tool, tmp_path):
    out = tmp_path / "written"
    assert overwrite(tool, out) == 0
    (out / "stale.txt").write_text("from the first write")
    assert overwrite(tool, out, "--seed", "1") == 0
    assert not (out / "stale.txt").exists() and (out / ".written_by").read_text() == f"{OVERWRITERS[tool][2]}\n"
    assert is_dataset(out) == tool.startswith("tiny_dataset")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["written"]  # nothing left beside it


@pytest.mark.slow
def test_a_kill_between_the_renames_keeps_the_old_folder(tmp_path):
    # The old folder was removed before the new one was renamed in: a kill between the two left neither.
    out = tmp_path / "Cosmos-Predict2.5-tiny"
    assert tiny_cosmos.main(["--out", str(out)]) == 0
    (out / "mine.txt").write_text("the folder before")
    killed = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "kill_during_replace.py"),
                             "DiT4DiT.tools.tiny_cosmos", "--out", str(out), "--overwrite", "--seed", "1"],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                            timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    kept = [path for path in tmp_path.iterdir() if (path / "mine.txt").is_file()]
    assert [(path / "mine.txt").read_text() for path in kept] == ["the folder before"], sorted(tmp_path.iterdir())


@pytest.mark.slow
def test_tiny_cosmos_replaces_its_own_folder_from_before_the_marker(tmp_path):
    # `make tiny-assets` rewrites playground's tiny pipeline whenever the tool changes: folders it wrote before it
    # marked them (no .written_by) are known by their tiny sizes.
    out = tmp_path / "Cosmos-Predict2.5-tiny"
    assert tiny_cosmos.main(["--out", str(out)]) == 0
    (out / ".written_by").unlink()
    assert tiny_cosmos.main(["--out", str(out), "--overwrite"]) == 0
    assert (out / ".written_by").read_text() == "tiny_cosmos\n"
