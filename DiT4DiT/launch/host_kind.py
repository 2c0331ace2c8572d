"""Which kind of host this is for training, npu, cuda or cpu, with the reason; the launcher's first question.

Standard library only, and torch is asked (in a child process) only where an NVIDIA device node or nvidia-smi
exists: with torch_npu installed, `import torch` fails until CANN is sourced.

- npu:  `npu-smi info` lists devices.
- NPU signs without a working npu-smi (/dev/davinci* device nodes, or torch_npu installed) are a problem, not
  a CPU host: containers often lack the driver tools, and training the tiny CPU config there by surprise helps
  nobody.
- cuda: a CUDA build of torch sees devices.
- cpu:  none of the above.
`--device` overrides the detection (the chosen kind must still have devices).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from DiT4DiT.facts import DEVICE_KINDS
from DiT4DiT.host import npu_topology

KINDS = DEVICE_KINDS
MIN_PYTHON = (3, 10)
NPU_SMI_FIX = ("make `npu-smi info` work here (in a container: mount the driver, e.g. -v /usr/local/Ascend/driver:"
               "/usr/local/Ascend/driver -v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi), or pass --device=cpu "
               "to train on the CPU on purpose")
_CUDA_PROBE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


@dataclass(frozen=True)
class Host:
    kind: str
    visible: int  # devices this node may use (npu: after ASCEND_RT_VISIBLE_DEVICES); 0 on a CPU host
    total: int
    soc: str  # a2 / a3 on an NPU host, else "none"
    reason: str
    problem: str = ""  # why the host cannot train as this kind; "" when it can
    topology: npu_topology.Topology | None = None  # what npu-smi listed (its free HBM feeds the memory plan)


def python_problem(version: tuple[int, ...]) -> str:
    """Why this interpreter is too old for the training stack ("" when it is not)."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return ""
    found = ".".join(map(str, version[:3]))
    return f"Python {found} is too old: this project needs Python 3.10 or 3.11 (PYTHON=/path/to/python3.10)"


def npu_signs() -> list[str]:
    """What points at an NPU besides npu-smi."""
    signs = []
    nodes = sorted(p for p in glob.glob("/dev/davinci*") if p[len("/dev/davinci"):].isdigit())
    if nodes:
        signs.append(f"{len(nodes)} /dev/davinci* device node(s)")
    if importlib.util.find_spec("torch_npu") is not None:
        signs.append("torch_npu is installed")
    return signs


def nvidia_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def cuda_device_count() -> tuple[int, str]:
    """(devices a CUDA torch sees, "" or why it could not be asked)."""
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    try:
        result = subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=300,
                                env=env)
    except subprocess.TimeoutExpired:
        return 0, "asking torch for CUDA devices timed out"
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return 0, f"`import torch` fails: {lines[-1] if lines else result.returncode}"
    return int(result.stdout.split()[-1]), ""


def _npu_host(soc: str | None, reason_prefix: str) -> Host:
    topo = npu_topology.read_topology(soc)
    if topo is not None:
        reason = f"{reason_prefix}npu-smi lists {len(topo.chips)} devices ({topo.soc.upper()}, {topo.soc_source})"
        return Host("npu", len(topo.visible), len(topo.chips), topo.soc, reason, topology=topo)
    signs = npu_signs()
    seen = ", ".join(signs) if signs else "no NPU sign"
    problem = f"npu-smi is missing or lists no device ({seen}): {NPU_SMI_FIX}"
    return Host("npu", 0, 0, "none", f"{reason_prefix}{seen}", problem)


def _cuda_host(reason_prefix: str) -> Host:
    count, error = cuda_device_count()
    if count == 0:
        why = error or "torch sees no CUDA device"
        return Host("cuda", 0, 0, "none", f"{reason_prefix}{why}", f"no CUDA device: {why}; check nvidia-smi and "
                    "that torch is a CUDA build, or pass --device=cpu")
    return Host("cuda", count, count, "none", f"{reason_prefix}torch sees {count} CUDA device(s)")


def detect(device: str | None = None, soc: str | None = None) -> Host:
    """The host kind: `device` when given, else detected in the order npu, cuda, cpu."""
    if device == "cpu":
        return Host("cpu", 0, 0, "none", "--device=cpu")
    if device == "npu":
        return _npu_host(soc, "--device=npu; ")
    if device == "cuda":
        return _cuda_host("--device=cuda; ")
    host = _npu_host(soc, "")
    if host.problem == "" or npu_signs():
        return host
    if nvidia_present():
        return _cuda_host("")
    return Host("cpu", 0, 0, "none", "no npu-smi device, /dev/davinci* or torch_npu, and no NVIDIA device")
