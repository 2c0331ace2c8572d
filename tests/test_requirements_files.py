"""requirements.txt (CPU/GPU) and requirements-npu.txt (Ascend) pin the same shared stack."""

from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from DiT4DiT.tools.doctor import TORCH_NPU_FOR_CANN

ROOT = Path(__file__).resolve().parents[1]
NPU_ONLY = {"torch-npu", "mx-driving"}


def read_pins(path: Path, machine: str) -> dict[str, str]:
    """name -> pinned version for one CPU architecture; fails on anything that is not an exact pin."""
    env = {**default_environment(), "platform_machine": machine}
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith(("#", "--")):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{path.name}: '{line}' is not an exact pin"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{path.name}: {name} pinned twice for {machine}"
        pins[name] = specs[0].version
    return pins


def test_shared_pins_are_identical_on_both_architectures():
    for machine in ("aarch64", "x86_64"):
        cpu = read_pins(ROOT / "requirements.txt", machine)
        npu = read_pins(ROOT / "requirements-npu.txt", machine)
        assert not NPU_ONLY & cpu.keys(), "torch_npu / mx-driving break `import torch` without CANN"
        assert NPU_ONLY <= npu.keys()
        assert cpu.keys() == npu.keys() - NPU_ONLY, f"packages differ: {sorted(cpu.keys() ^ (npu.keys() - NPU_ONLY))}"
        for name, version in cpu.items():
            # The NPU file may only add a local build tag (+cpu: torch_npu needs the CPU build of torch).
            assert npu[name].split("+")[0] == version, f"{name}: requirements.txt {version} vs requirements-npu.txt {npu[name]}"


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
