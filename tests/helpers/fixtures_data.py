"""Data fixtures: a generated tiny RoboTwin dataset, a read-only copy of the real PickNPlace dataset, configs."""

from __future__ import annotations

import hashlib
import shutil
import stat
from pathlib import Path

import pytest

# The trimmed copy shipped in the repository (episodes 0-2 of the GR00T demo data; tests/data/.../SOURCE.md).
PICKNPLACE = Path(__file__).resolve().parents[1] / "data" / "robot_sim.PickNPlace"
TINY_TASKS = ("adjust_bottle", "place_a2b_left", "place_a2b_right")


def make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file and folder under root with size, mtime and content hash: equal snapshots mean nothing was
    written there. This comparison is what the read-only tests check: as root, chmod protects nothing."""
    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"

    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, digest(p)) for p in sorted(root.rglob("*"))}


def dataset_of(cfg, split: str = "train"):
    """The `split` of a whole test config's mixture, built as the Trainer builds it: from the data section, the
    action chunk and the seed."""
    from DiT4DiT.config.sections import DatasetsVlaDataSection
    from DiT4DiT.config.typed import section
    from DiT4DiT.dataloader import build_vla_dataset

    return build_vla_dataset(section(cfg.datasets.vla_data, DatasetsVlaDataSection),
                             cfg.framework.action_model.future_action_window_size + 1, cfg.seed, split)


def build_read_only(task_dir: Path, cfg):
    """Build the dataset of `cfg` from `task_dir` made read-only; its content snapshot must not change."""
    make_read_only(task_dir)
    before = snapshot(task_dir)
    try:
        return dataset_of(cfg)
    finally:
        assert snapshot(task_dir) == before


@pytest.fixture(scope="session")
def tiny_robotwin_root(tmp_path_factory) -> Path:
    """Three RoboTwin task folders (3 episodes of 24-40 frames each), generated once per session, read-only."""
    from DiT4DiT.tools.tiny_robotwin import generate

    root = tmp_path_factory.mktemp("robotwin_tiny")
    generate(root, seed=0, tasks=TINY_TASKS)
    make_read_only(root)
    yield root
    make_writable(root)


@pytest.fixture(scope="session")
def readonly_picknplace(tmp_path_factory) -> Path:
    """A read-only copy of robot_sim.PickNPlace; returns its parent (the data_root_dir)."""
    if not PICKNPLACE.is_dir():
        pytest.fail(f"the dataset {PICKNPLACE} is missing; it ships in the repository under tests/data/")
    root = tmp_path_factory.mktemp("datasets")
    shutil.copytree(PICKNPLACE, root / PICKNPLACE.name)
    make_read_only(root)
    yield root
    make_writable(root)


@pytest.fixture
def data_cfg(tmp_path):
    """Factory: a full config reading `root` with `data_mix`, caching under this test's tmp dir, loaded and its data
    configs checked as training loads it."""
    from DiT4DiT.config.schema import load_config
    from DiT4DiT.config.validate import action_chunk
    from DiT4DiT.dataloader.config_checks import check_data_configs

    def build(root: Path | str, data_mix: str = "robotwin", *overrides: str):
        # RoboTwin's 14-D joints (the schema's defaults are the original's 64 / 32); the action head's widths and
        # horizon follow whatever the test sets for the data, as the config's cross-key rules require.
        data = {"max_state_dim": "14", "max_action_dim": "14", "future_action_window_size": "7"}
        data.update({k.split(".")[-1]: v for k, _, v in (o.partition("=") for o in overrides) if k.split(".")[-1] in data})
        head = [f"framework.action_model.state_dim={data['max_state_dim']}",
                f"framework.action_model.action_dim={data['max_action_dim']}",
                f"framework.action_model.action_horizon={int(data['future_action_window_size']) + 1}"]
        cfg = load_config(None, [
            f"datasets.vla_data.data_root_dir={root}",
            f"datasets.vla_data.data_mix={data_mix}",
            f"datasets.vla_data.cache_dir={tmp_path / 'cache'}",
            f"datasets.vla_data.max_state_dim={data['max_state_dim']}",
            f"datasets.vla_data.max_action_dim={data['max_action_dim']}",
            *head, *overrides,
        ])
        check_data_configs(cfg.datasets.vla_data, action_chunk(cfg))
        return cfg

    return build


@pytest.fixture
def writable_task(tiny_robotwin_root, tmp_path) -> Path:
    """A writable copy of one tiny RoboTwin task folder, under <tmp>/root/adjust_bottle, for breaking on purpose."""
    target = tmp_path / "root" / "adjust_bottle"
    shutil.copytree(tiny_robotwin_root / "adjust_bottle", target)
    make_writable(target)
    return target
