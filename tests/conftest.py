# Fixtures shared by the tests live in tests/helpers/ (tiny pipeline and model configs, tiny
# datasets, the golden tiny run, a served policy).
import pytest

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
