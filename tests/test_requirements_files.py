"""requirements.txt (CPU/GPU) and requirements-npu.txt (Ascend) pin the same shared stack."""

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

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
# Requires-Python of each pinned release, from PyPI's metadata as pip reports it (pip install --dry-run --report
# --python-version 3.10/3.11 --only-binary=:all: -r requirements.txt; deepspeed, an sdist, declares none).
# torch-npu and mx-driving declare none either; their wheels exist for cp310 and cp311 only.
REQUIRES_PYTHON = {
    "accelerate==1.12.0": ">=3.10", "av==17.1.0": ">=3.10", "av==18.1.0": ">=3.11", "deepspeed==0.16.9": "",
    "diffusers==0.38.0": ">=3.10", "huggingface-hub==0.36.2": ">=3.8", "matplotlib==3.10.7": ">=3.10",
    "mx-driving==26.2.0.post2": ">=3.10,<3.12", "numpy==2.2.6": ">=3.10", "numpy==2.4.6": ">=3.11",
    "omegaconf==2.4.0": ">=3.10", "pandas==2.3.3": ">=3.9", "pillow==11.3.0": ">=3.9", "pyarrow==25.0.1": ">=3.10",
    "pyarrow==26.0.1": ">=3.11", "pytest==9.0.3": ">=3.10", "pyyaml==6.0.3": ">=3.8", "safetensors==0.8.0": ">=3.10",
    "tokenizers==0.22.2": ">=3.9", "torch==2.7.1": ">=3.9", "torch-npu==2.7.1.post4": ">=3.10,<3.12",
    "torchvision==0.22.1": ">=3.9", "tqdm==4.67.1": ">=3.7", "transformers==4.57.6": ">=3.9", "wandb==0.31.0": ">=3.10",
    "msgpack==1.2.4": ">=3.10", "websockets==16.1.1": ">=3.10",
    # The Ascend-only pins (uv pip compile --python-platform {aarch64,x86_64}-manylinux_2_28 --python-version 3.10/3.11,
    # scripts/resolve_requirements.py): Requires-Python from their metadata.
    "wandb==0.25.0": ">=3.9", "protobuf==3.20.3": ">=3.7", "decorator==5.3.1": ">=3.8", "sympy==1.14.0": ">=3.9",
    "cffi==2.1.1": ">=3.10", "attrs==26.1.0": ">=3.9", "cython==3.3.1": ">=3.9", "pathlib2==2.3.7.post1": "",
    "scipy==1.15.3": ">=3.10", "scipy==1.17.1": ">=3.11", "requests==2.34.2": ">=3.10", "psutil==7.2.2": ">=3.6",
    "absl-py==2.5.1": ">=3.10", "cloudpickle==3.1.3": ">=3.8", "ml-dtypes==0.7.0": ">=3.10", "tornado==6.5.10": ">=3.9",
    "setuptools==84.2.1": ">=3.10",
}


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


@pytest.mark.parametrize("machine, python", TARGETS)
@pytest.mark.parametrize("name", ["requirements.txt", "requirements-npu.txt"])
def test_every_pin_installs_on_python_3_10_and_3_11(name, machine, python):
    for package, version in read_pins(ROOT / name, machine, python).items():
        pin = f"{package}=={version.split('+')[0]}"
        assert pin in REQUIRES_PYTHON, f"{name}: add the Requires-Python of {pin} to REQUIRES_PYTHON"
        assert python in SpecifierSet(REQUIRES_PYTHON[pin]), f"{name}: {pin} needs Python {REQUIRES_PYTHON[pin]}, not {python}"


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
