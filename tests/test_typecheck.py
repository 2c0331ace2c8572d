"""The type checker passes on the package, as pyproject.toml's [tool.mypy] sets it (`make typecheck`): the config
package strict, every module checked, the modules not yet clean listed there. In process (mypy's API), with its
cache in a temporary folder: a few seconds, so the fast tier runs it."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_package_type_checks(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is pinned in requirements.txt; `make venv` installs it")
    stdout, stderr, status = api.run(["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path),
                                      "--no-error-summary", str(REPO / "DiT4DiT")])
    assert status == 0, f"mypy (make typecheck) found:\n{stdout}{stderr}"


def test_the_config_package_is_checked_strictly():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the Ascend host's 3.10 runs the check above

    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs") and o.get("disallow_any_generics")]
    ignored = {m for o in overrides if o.get("ignore_errors") for m in o["module"]}
    assert any("DiT4DiT.config.*" in o["module"] for o in strict)
    assert not {m for m in ignored if m.startswith("DiT4DiT.config")}
