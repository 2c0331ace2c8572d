# Fixtures shared by the tests live in tests/helpers/ (tiny pipeline and model configs, tiny
# datasets, the golden tiny run, a served policy).
import os
import sys
from pathlib import Path

import pytest

from DiT4DiT.launch.environment import omp_threads
from helpers.cpu_kernels import pin_avx2_kernels

# Each xdist worker gets its share of the cores, as the launcher gives each rank on a CPU host: two workers with two
# OpenMP threads each on two cores spin against each other and train ten times slower. The processes a test starts
# inherit it. Set here, before torch is imported, and only in a worker: the workers inherit the controller's
# environment, and without workers torch's default (every core) is the share.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    share = omp_threads(os.cpu_count() or 1, int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(share))
# The golden losses are exact floats: the same kernels on every x86 machine, in the worker and what it starts.
pin_avx2_kernels()
# What scripts/train_8p.sh exports (DiT4DiT/launch/plan.py), for the tests that run `accelerate launch` themselves:
# no pool of inductor compile workers when a DeepSpeed launch imports deepspeed.
os.environ.setdefault("TORCH_WARM_POOL", "0")
# DeepSpeed's CPU collective op, built into the environment by `make test` (Makefile: DS_SHM_OP); without it each
# session compiles the op again under its own HOME (two CPU minutes).
if (Path(sys.prefix) / "torch-extensions").is_dir():
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch-extensions"))

pytest_plugins = ["helpers.fixtures_model", "helpers.fixtures_data", "helpers.fixtures_training", "helpers.fixtures_serving"]


@pytest.fixture(scope="session", autouse=True)
def no_writes_to_home(tmp_path_factory):
    """Every test and every process it starts writes caches under a temporary folder, never into the real $HOME.

    The data loader's default cache is ~/.cache/dit4dit, and libraries (wandb, matplotlib, DeepSpeed's op
    builder) keep their own caches under $HOME; pointing HOME and DIT4DIT_CACHE_DIR at a session folder covers
    both, including `accelerate launch` and launcher subprocesses, which inherit the environment.
    """
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("DIT4DIT_CACHE_DIR", str(home / "dit4dit-cache"))
        patch.delenv("XDG_CACHE_HOME", raising=False)
        yield home


# `make test` runs the suite on two workers (pytest-xdist, --dist loadgroup). A module's tests stay on one worker
# so that its module fixtures are made once; a test marked xdist_group("name") joins that group instead (the
# session runs that several modules read). The groups measured longest are sent first, then the other slow ones,
# then the fast tier, so that both workers finish at about the same time.
LONGEST_FIRST = ("deepspeed", "test_npu_patch.py", "resume", "test_resume_kinds.py", "test_multinode.py",
                 "test_long_runs.py", "test_train_e2e.py", "test_doctor.py", "test_closed_loop_metaworld.py",
                 "test_bench_soak.py", "test_heartbeat.py", "launcher_run", "test_prompt_store.py", "test_metrics_once.py")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.path.name))

    def order(item) -> tuple[int, int]:
        group = item.get_closest_marker("xdist_group").args[0]
        if group in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(group)
        return (1 if item.get_closest_marker("slow") else 2), 0

    items.sort(key=order)  # stable: the collection order within each group is kept
