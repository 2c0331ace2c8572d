"""requirements.txt (CPU/GPU) and requirements-npu.txt (Ascend) pin the same shared stack."""

import platform
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from DiT4DiT.doctor.checks import TORCH_NPU_FOR_CANN
from DiT4DiT.doctor.requirement_pins import read_pins

ROOT = Path(__file__).resolve().parents[1]
# CANN 9.0's Python dependencies (and setuptools for transfer_to_npu), pinned for the Ascend stack only.
CANN_PYTHON = {"protobuf", "decorator", "sympy", "cffi", "attrs", "cython", "pathlib2", "scipy", "requests", "psutil",
               "absl-py", "cloudpickle", "ml-dtypes", "tornado", "setuptools"}
NPU_ONLY = {"torch-npu", "mx-driving", *CANN_PYTHON}
# Shared packages the NPU file pins differently, and why: wandb >= 0.26 needs protobuf >= 5, CANN asks for 3.20.x.
NPU_DIFFERENT = {"wandb": "0.25.0"}
PYTHONS = ("3.10", "3.11")
TARGETS = [(machine, python) for machine in ("aarch64", "x86_64") for python in PYTHONS]


@pytest.mark.parametrize("machine, python", TARGETS)
def test_shared_pins_are_identical_on_both_architectures_and_pythons(machine, python):
    cpu = read_pins(ROOT / "requirements.txt", machine, python)
    npu = read_pins(ROOT / "requirements-npu.txt", machine, python)
    assert not NPU_ONLY & cpu.keys(), "torch_npu / mx-driving break `import torch` without CANN"
    assert NPU_ONLY <= npu.keys()
    assert cpu.keys() == npu.keys() - NPU_ONLY, f"packages differ: {sorted(cpu.keys() ^ (npu.keys() - NPU_ONLY))}"
    for name, version in cpu.items():
        # The NPU file may only add a local build tag (+cpu: torch_npu needs the CPU build of torch).
        expected = NPU_DIFFERENT.get(name, version)
        assert npu[name].split("+")[0] == expected, f"{name}: requirements.txt {version} vs requirements-npu.txt {npu[name]}"


def test_npu_stack_is_the_ascend_target():
    aarch64 = read_pins(ROOT / "requirements-npu.txt", "aarch64")
    x86_64 = read_pins(ROOT / "requirements-npu.txt", "x86_64")
    assert aarch64["torch"] == "2.7.1" and x86_64["torch"] == "2.7.1+cpu"
    assert x86_64["torchvision"] == "0.22.1+cpu"
    expected = {"torch-npu": "2.7.1.post4", "deepspeed": "0.16.9", "accelerate": "1.12.0",
                "transformers": "4.57.6", "diffusers": "0.38.0", "torchvision": "0.22.1"}
    for name, version in expected.items():
        assert aarch64[name] == version, name
    # The doctor's compatibility table must say this torch_npu is the CANN 9.0.0 build.
    assert TORCH_NPU_FOR_CANN[aarch64["torch-npu"]] == "9.0.0"


def installed_pins() -> dict[str, str]:
    """name -> version of every distribution in this environment."""
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}


def test_every_installed_pin_admits_each_python_it_is_pinned_for():
    """Requires-Python comes from the releases' own metadata, read from this environment (which `make venv`
    installs from requirements.txt). So the pins installed here are checked, for 3.10 and 3.11 both; every pin,
    installed or not, against the index's Requires-Python by tests/test_requirements_resolved.py."""
    here = read_pins(ROOT / "requirements.txt", platform.machine(), f"{sys.version_info.major}.{sys.version_info.minor}")
    installed = installed_pins()
    assert {k: installed.get(k) for k in here} == here, "this environment is not requirements.txt: run make venv"
    for name in ("requirements.txt", "requirements-npu.txt"):
        for machine, python in TARGETS:
            for package, version in read_pins(ROOT / name, machine, python).items():
                if installed.get(package, "").split("+")[0] != version.split("+")[0]:
                    continue  # another release: its metadata is not here
                needs = metadata.metadata(package).get("Requires-Python") or ""
                assert python in SpecifierSet(needs), f"{name}: {package}=={version} needs Python {needs}, not {python}"


def test_npu_stack_carries_cann_s_python_dependencies():
    for machine, python in TARGETS:
        npu = read_pins(ROOT / "requirements-npu.txt", machine, python)
        assert CANN_PYTHON <= npu.keys(), sorted(CANN_PYTHON - npu.keys())
        assert npu["protobuf"].startswith("3.20."), "CANN 9.0 asks for protobuf 3.20.x"
    # The doctor imports the same packages (by their import names) on NPU hosts.
    from DiT4DiT.doctor.checks import CANN_PYTHON_PACKAGES

    assert CANN_PYTHON_PACKAGES.keys() - {"numpy", "pyyaml"} == CANN_PYTHON  # those two are pinned for everyone


def test_python_3_10_gets_the_older_releases():
    pins = read_pins(ROOT / "requirements.txt", "x86_64", "3.10")
    assert (pins["av"], pins["numpy"], pins["pyarrow"]) == ("17.1.0", "2.2.6", "25.0.1")
