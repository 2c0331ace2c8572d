"""Is this machine ready to train? One line per check: PASS, WARN, FAIL (each with its fix) or SKIP.

    python -m DiT4DiT.doctor [--num_processes N] [--num_machines M] [--base_model DIR] [--config_yaml FILE]
                                   [--soc a2|a3]

Run it in the shell you will launch from (after `source .../set_env.sh`). The exit status is 1 when a check
FAILs. On a host where npu-smi lists no device, the NPU checks are SKIPped (this is how CPU smoke runs and
CI look); they FAIL only when the host is meant to be an NPU host but cannot be one: torch_npu installed
with no NPU visible. `--num_processes` (per node) is checked against this node's visible NPUs; on a CPU host
it is the number of CPU processes and is not limited. With `--num_machines`, run the doctor on every node: the
device checks are this node's, the memory estimate counts every process of the job.

Nothing here imports torch, torch_npu or mx_driving into this process: with torch_npu installed,
`import torch` fails until CANN is sourced, and importing mx_driving applies transfer_to_npu globally.
Those imports run in child processes whose failures become FAIL lines.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from DiT4DiT.host import npu_topology
from DiT4DiT.memory import plan as memory_plan
from DiT4DiT.errors import DiT4DiTError, run_main
from DiT4DiT.facts import TINY_MODEL_DIR
from DiT4DiT.doctor import hccl_ports, npu_network, time_plan
from DiT4DiT.launch import host_kind, preflight
from DiT4DiT.memory.host import HostNeed, read_meminfo
from DiT4DiT.memory.estimate import mixture_views
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

TORCH_VERSION = "2.7.1"
# torch_npu release for torch 2.7.1 -> the CANN it is built for (Ascend/pytorch COMPATIBILITY, ASCEND_NOTES §3.1).
TORCH_NPU_FOR_CANN = {"2.7.1": "8.3.RC1", "2.7.1.post2": "8.5.0", "2.7.1.post4": "9.0.0", "2.7.1.post8": "9.1.0"}
NPU_DEFAULTS = ("DiT4DiT/config/robotwin/dit4dit_robotwin.yaml", "playground/Pretrained_models/Cosmos-Predict2.5-2B")
CPU_DEFAULTS = ("DiT4DiT/config/tiny/dit4dit_tiny.yaml", TINY_MODEL_DIR)
HCCL_CONNECT_RANGE = (120, 7200)
HCCL_EXEC_DEFAULT, HCCL_EVENT_DEFAULT = 1836, 1868
PROBE_TIMEOUT_S = 300
GIB = 1024**3

_TORCH_NPU_PROBE = """
import json, torch, torch_npu
from torch_npu.utils import get_cann_version
print(json.dumps({"cann": get_cann_version(), "devices": torch.npu.device_count()}))
"""
# API 1.0 exports a Patcher too (a context manager without `add`), so the generation is told by `add`.
# CANN 9.0's Python dependencies (install guide, "Runtime dependencies"), those its op compiler (te/tbe) imports,
# and setuptools (transfer_to_npu): distribution -> import name. requirements-npu.txt pins them.
CANN_PYTHON_PACKAGES = {
    "numpy": "numpy", "decorator": "decorator", "sympy": "sympy", "cffi": "cffi", "protobuf": "google.protobuf",
    "attrs": "attr", "cython": "Cython", "pyyaml": "yaml", "pathlib2": "pathlib2", "scipy": "scipy",
    "requests": "requests", "psutil": "psutil", "absl-py": "absl", "cloudpickle": "cloudpickle",
    "ml-dtypes": "ml_dtypes", "tornado": "tornado", "setuptools": "setuptools",
}
CANN_PYTHON_MODULES = tuple(CANN_PYTHON_PACKAGES.values())
CANN_MODULES_PROBE = f"""
import importlib, json
failed = {{}}
for name in {CANN_PYTHON_MODULES!r}:
    try:
        importlib.import_module(name)
    except Exception as err:
        failed[name] = f"{{type(err).__name__}}: {{err}}"
from google.protobuf import __version__ as protobuf
print(json.dumps({{"failed": failed, "protobuf": protobuf}}))
"""
MX_DRIVING_PROBE = """
import json, mx_driving.patcher as p
print(json.dumps({"has_add": hasattr(getattr(p, "Patcher", None), "add"),
                  "builder": hasattr(p, "default_patcher_builder")}))
"""
# The patched trainer's own start-up step (the helper scripts/port_to_npu.py puts into train.py), run in a child
# so its patches die with it: the line the training log will show, and whether it is a problem.
PORT_TOOL = Path(__file__).resolve().parents[2] / "scripts" / "port_to_npu.py"
MX_PATCHER_PROBE = f"""
import contextlib, importlib.metadata, json, logging, os, runpy, sys, warnings
namespace = dict(globals())
exec(runpy.run_path({str(PORT_TOOL)!r})["PATCHER_HELPER"], namespace)
with contextlib.ExitStack() as stack:
    line, problem = namespace["_apply_mx_patcher"](stack)
print(json.dumps({{"line": line, "problem": problem}}))
"""


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # PASS, WARN, FAIL or SKIP
    detail: str
    fix: str = ""
    more: tuple[str, ...] = ()  # lines printed under the check's own (the memory plan's candidates)

    def line(self) -> str:
        return (f"{self.status:<4}  {self.name:<15} {self.detail}" + (f"  -> fix: {self.fix}" if self.fix else "")
                + "".join(f"\n{'':22}{more}" for more in self.more))


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_dir(name: str) -> Path | None:
    """Where a package is installed, found without importing it."""
    spec = importlib.util.find_spec(name)
    return Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None


def run_probe(code: str) -> tuple[dict | None, str]:
    """Run `code` in a child interpreter; (the JSON object it prints last, "") or (None, the error's last line)."""
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {PROBE_TIMEOUT_S} s"
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        return None, lines[-1] if lines else f"exit code {result.returncode}"
    return json.loads(result.stdout.strip().splitlines()[-1]), ""


def patcher_api(has_add: bool, builder: bool) -> str | None:
    """mx_driving patcher generation: 2.0 when `Patcher` has `add` (2.0 wheels keep the 1.0 builder as a shim)."""
    if has_add:
        return "2.0"
    if builder:
        return "1.0"
    return None


def torch_npu_matches(torch_version: str, torch_npu_version: str) -> bool:
    """torch_npu X.Y.Z[.postN] is built for torch X.Y.Z (local tags like +cpu ignored)."""
    return torch_npu_version.split(".post")[0] == torch_version.split("+")[0]


def hccl_problems(env: dict[str, str]) -> list[str]:
    """Invalid HCCL timeout settings (ranges from the CANN 9.0 environment-variable reference)."""
    problems: list[str] = []
    values: dict[str, int] = {}
    for var in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_EVENT_TIMEOUT"):
        if var in env:
            if not env[var].isdigit():
                problems.append(f"{var}={env[var]!r} is not a whole number of seconds")
            else:
                values[var] = int(env[var])
    low, high = HCCL_CONNECT_RANGE
    if "HCCL_CONNECT_TIMEOUT" in values and not low <= values["HCCL_CONNECT_TIMEOUT"] <= high:
        problems.append(f"HCCL_CONNECT_TIMEOUT={values['HCCL_CONNECT_TIMEOUT']} is outside [{low}, {high}]")
    execute = values.get("HCCL_EXEC_TIMEOUT", HCCL_EXEC_DEFAULT)
    event = values.get("HCCL_EVENT_TIMEOUT", HCCL_EVENT_DEFAULT)
    if execute != 0 and event <= execute:
        problems.append(f"HCCL_EVENT_TIMEOUT ({event}) must exceed HCCL_EXEC_TIMEOUT ({execute})")
    return problems


class Doctor:
    """Gathers host facts once; each `check_*` method returns one Check."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str]):
        self.args, self.env = args, env
        self.npu_smi = npu_topology.run_npu_smi()
        self.topo = npu_topology.read_topology(args.soc, self.npu_smi or "")
        self.npu_host = self.topo is not None
        self.torch_npu = installed_version("torch-npu")
        config_default, model_default = NPU_DEFAULTS if self.npu_host else CPU_DEFAULTS
        self.config_yaml = args.config_yaml or config_default
        self.cfg, self.cfg_error = self._load_config()
        cfg_model = self.cfg.framework.cosmos25.base_model if self.cfg is not None else None
        self.base_model = Path(args.base_model or cfg_model or model_default)
        # Read once (a header per weight file): the base-model check and the three checks that need the folder.
        self.base_model_problems = pipeline_folder_problems(self.base_model)
        self.num_processes = args.num_processes or (len(self.topo.visible) if self.topo else 1)
        self.num_machines = args.num_machines
        self._probe: tuple[dict | None, str] | None = None

    def _load_config(self):
        from DiT4DiT.config.schema import load_config  # imported here: keeps `--help` instant
        from DiT4DiT.config.validate import action_chunk
        from DiT4DiT.dataloader.config_checks import check_data_configs

        try:
            cfg = load_config(self.config_yaml, [])
            check_data_configs(cfg.datasets.vla_data, action_chunk(cfg))
            return cfg, ""
        except ValueError as err:
            return None, str(err)

    def sections(self):
        """The loaded config's (framework, trainer, data) sections, which the memory checks read."""
        return self.cfg.framework, self.cfg.trainer, self.cfg.datasets.vla_data

    def torch_npu_probe(self) -> tuple[dict | None, str]:
        if self._probe is None:
            self._probe = run_probe(_TORCH_NPU_PROBE)
        return self._probe

    def skip_without_npu(self, name: str) -> Check | None:
        return None if self.npu_host else Check(name, "SKIP", "no NPU on this host")

    def npus(self) -> npu_topology.Topology:
        """The NPUs, in a check that skip_without_npu let through."""
        assert self.topo is not None  # npu_host says the topology was read
        return self.topo

    def check_python(self) -> Check:
        version = ".".join(map(str, sys.version_info[:3]))
        problem = host_kind.python_problem(sys.version_info[:3])
        if problem:
            return Check("python", "FAIL", problem, "create the environment with Python 3.10 or 3.11")
        return Check("python", "PASS", f"Python {version} ({sys.executable})")

    def check_nodes(self) -> Check:
        per_node = f"{self.num_processes} process(es) per node"
        if self.num_machines == 1:
            return Check("nodes", "PASS", f"1 node, {per_node}")
        return Check("nodes", "PASS", f"{self.num_machines} nodes x {per_node} = {self.world_size} processes; the "
                     "checks here are this node's: run the doctor on every node, with the run dir on a shared filesystem")

    @property
    def world_size(self) -> int:
        return self.num_processes * self.num_machines

    def check_devices(self) -> Check:
        name = "npu_devices"
        if self.topo is None:
            if self.torch_npu:
                return Check(name, "FAIL", f"torch_npu {self.torch_npu} is installed but npu-smi lists no NPU",
                             "install the Ascend driver and firmware so that `npu-smi info` lists the devices")
            return Check(name, "SKIP", f"no NPU (npu-smi absent or empty): CPU host, {self.num_processes} CPU process(es)")
        visible, total = len(self.topo.visible), len(self.topo.chips)
        where = f"{visible} of {total} devices visible ({self.topo.soc.upper()})"
        if "ASCEND_RT_VISIBLE_DEVICES" in self.env:
            where += f", ASCEND_RT_VISIBLE_DEVICES={self.env['ASCEND_RT_VISIBLE_DEVICES']}"
        if self.num_processes > visible:
            return Check(name, "FAIL", f"--num_processes {self.num_processes} per node but {where} on this node",
                         f"use --num_processes={visible} or fewer (an Atlas 800T A3 node has 16 devices, an A2 node 8)")
        unhealthy = [f"NPU {c.npu} chip {c.chip}: {c.health}" for c in self.topo.visible if c.health != "OK"]
        if unhealthy:
            return Check(name, "WARN", f"{where}; not OK: {', '.join(unhealthy)}", "check `npu-smi info` and the device logs")
        return Check(name, "PASS", f"{where}; {self.num_processes} process(es)")

    def check_soc(self) -> Check:
        name = "a2_a3_zero_copy"
        if skip := self.skip_without_npu(name):
            return skip
        topo = self.npus()
        soc, source = topo.soc, topo.soc_source
        zero_copy = self.env.get("TORCH_HCCL_ZERO_COPY")
        kind = f"{soc.upper()} ({source})"
        if soc == "a2":
            if zero_copy == "1":
                return Check(name, "FAIL", f"{kind} with TORCH_HCCL_ZERO_COPY=1, which only A3 supports",
                             "unset TORCH_HCCL_ZERO_COPY (or --soc=a3 if this really is an A3 node)")
            return Check(name, "PASS", f"{kind}: TORCH_HCCL_ZERO_COPY off")
        if zero_copy == "1" and "expandable_segments:True" not in self.env.get("PYTORCH_NPU_ALLOC_CONF", ""):
            return Check(name, "FAIL", f"{kind}: TORCH_HCCL_ZERO_COPY=1 needs expandable segments",
                         "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True")
        if zero_copy == "1" and self.num_machines > 1:
            return Check(name, "WARN", f"{kind}: TORCH_HCCL_ZERO_COPY=1 on {self.num_machines} nodes; the beta feature is "
                         "validated on one node only", "unset TORCH_HCCL_ZERO_COPY unless you mean to try it")
        state = ("on: a trial feature of CANN 9.0's HCCL, not for production; A/B it (docs/ascend.md)" if zero_copy == "1"
                 else "off (scripts/train_8p.sh leaves it off unless --hccl_zero_copy=1 or exported)")
        return Check(name, "PASS", f"{kind}: TORCH_HCCL_ZERO_COPY {state}")

    def check_cann(self) -> Check:
        name = "cann_env"
        if skip := self.skip_without_npu(name):
            return skip
        home = self.env.get("ASCEND_HOME_PATH") or self.env.get("ASCEND_TOOLKIT_HOME")
        if home:
            return Check(name, "PASS", f"CANN sourced: {home}")
        found, _ = preflight.cann_scripts(self.env)
        fix = f"source {found[0]}" if found else "install CANN 9.0.0 (toolkit, kernels, nnal), then source its set_env.sh"
        return Check(name, "FAIL", "CANN environment not sourced (ASCEND_HOME_PATH unset)", fix)

    def check_cann_python(self) -> Check:
        name = "cann_python"
        if not self.npu_host and not self.torch_npu:
            return Check(name, "SKIP", "no NPU stack here (CANN's Python packages come with requirements-npu.txt)")
        found, error = run_probe(CANN_MODULES_PROBE)
        fix = "pip install -r requirements-npu.txt (CANN's op compiler imports these; error 50001 or 'No module named' otherwise)"
        if found is None:
            return Check(name, "FAIL", f"CANN's Python packages do not import: {error}", fix)
        if found["failed"]:
            failed = ", ".join(f"{module} ({why})" for module, why in found["failed"].items())
            return Check(name, "FAIL", f"do not import: {failed}", fix)
        detail = f"{len(CANN_PYTHON_MODULES)} packages import (protobuf {found['protobuf']})"
        if not found["protobuf"].startswith("3.20."):
            return Check(name, "WARN", detail + "; CANN 9.0 asks for protobuf 3.20.x", "pip install protobuf==3.20.3")
        return Check(name, "PASS", detail)

    def check_npu_network(self) -> Check:
        name = "npu_network"
        if skip := self.skip_without_npu(name):
            return skip
        bad = "FAIL" if self.num_machines > 1 else "WARN"
        scope = "collectives between nodes use these ports" if self.num_machines > 1 else \
            "one node uses HCCS, so this matters only for multi-node jobs"
        tool = npu_network.hccn_tool()
        if tool is None:
            return Check(name, bad, f"hccn_tool not found (PATH, {npu_network.DRIVER_TOOL}); {scope}",
                         "install the Ascend driver's tools or put hccn_tool on PATH")
        topo = self.npus()
        devices = [i for i, chip in enumerate(topo.chips) if chip in topo.visible]
        ports = [npu_network.read_port(tool, device) for device in devices]
        failing = [f"device {p.device}: {', '.join(p.problems())}" for p in ports if p.problems()]
        if failing:
            return Check(name, bad, f"{len(failing)} of {len(ports)} NPU ports not ready ({'; '.join(failing)}); {scope}",
                         "check the cabling and /etc/hccn.conf (hccn_tool -i N -ip -s address A netmask M), "
                         "then hccn_tool -i N -net_health -g")
        return Check(name, "PASS", f"{len(ports)} NPU ports: link UP, an IP address, net health Success")

    def check_versions(self) -> Check:
        name = "stack_versions"
        torch = installed_version("torch")
        if torch is None:
            return Check(name, "FAIL", "torch is not installed", "pip install -r requirements.txt (CPU/GPU) or requirements-npu.txt")
        if torch.split("+")[0] != TORCH_VERSION:
            return Check(name, "WARN", f"torch {torch}; this project pins {TORCH_VERSION}", f"pip install torch=={TORCH_VERSION}")
        if not self.npu_host and not self.torch_npu:
            return Check(name, "PASS", f"torch {torch} (no torch_npu: CPU/GPU stack)")
        if not self.torch_npu:
            return Check(name, "FAIL", f"torch {torch} but torch_npu is not installed", "pip install -r requirements-npu.txt")
        if not torch_npu_matches(torch, self.torch_npu):
            return Check(name, "FAIL", f"torch_npu {self.torch_npu} is not built for torch {torch}",
                         f"pip install torch=={TORCH_VERSION} and the matching torch-npu (requirements-npu.txt)")
        if not (self.env.get("ASCEND_HOME_PATH") or self.env.get("ASCEND_TOOLKIT_HOME")):
            return Check(name, "SKIP", f"torch {torch}, torch_npu {self.torch_npu}; CANN version unknown until CANN is sourced")
        probe, error = self.torch_npu_probe()
        if probe is None:
            return Check(name, "FAIL", f"`import torch_npu` fails: {error}",
                         "source CANN's set_env.sh; install the torch_npu release for your CANN (requirements-npu.txt)")
        cann, wanted = probe["cann"], TORCH_NPU_FOR_CANN.get(self.torch_npu)
        detail = f"torch {torch}, torch_npu {self.torch_npu}, CANN {cann or 'unknown'}, {probe['devices']} device(s)"
        if wanted is None:
            return Check(name, "WARN", detail + ": this torch_npu release is not in our compatibility table",
                         "check Ascend/pytorch COMPATIBILITY for your CANN")
        if cann and not cann.startswith(wanted):
            good = [v for v, c in TORCH_NPU_FOR_CANN.items() if cann.startswith(c)]
            return Check(name, "FAIL", f"{detail}: torch_npu {self.torch_npu} is built for CANN {wanted}",
                         f"pip install torch-npu=={good[0]}" if good else f"install CANN {wanted}")
        return Check(name, "PASS", detail)

    def check_libraries(self) -> Check:
        name = "shared_libs"
        if not self.torch_npu:
            return Check(name, "SKIP", "torch_npu not installed (libc10.so / libtorch_npu.so only matter to NPU extensions)")
        search = {os.path.realpath(p) for p in self.env.get("LD_LIBRARY_PATH", "").split(":") if p}
        missing, off_path = [], []
        for package, lib in (("torch", "libc10.so"), ("torch_npu", "libtorch_npu.so")):
            pkg = package_dir(package)
            lib_dir = pkg / "lib" if pkg else None
            if lib_dir is None or not (lib_dir / lib).is_file():
                missing.append(f"{lib} (in {lib_dir})")
            elif os.path.realpath(lib_dir) not in search:
                off_path.append(str(lib_dir))
        if missing:
            return Check(name, "FAIL", f"missing: {', '.join(missing)}", "reinstall torch and torch_npu (requirements-npu.txt)")
        if off_path:
            return Check(name, "WARN", f"not on LD_LIBRARY_PATH: {', '.join(off_path)} (mx_driving fails with 'libc10.so: cannot open')",
                         "scripts/train_8p.sh adds them; for other launches: export LD_LIBRARY_PATH=" + ":".join(off_path) + ":$LD_LIBRARY_PATH")
        return Check(name, "PASS", "libc10.so and libtorch_npu.so are on LD_LIBRARY_PATH")

    def check_mx_driving(self) -> Check:
        name = "mx_driving"
        version = installed_version("mx-driving")
        if version is None:
            if not self.npu_host:
                return Check(name, "SKIP", "not installed (NPU only)")
            return Check(name, "WARN", "not installed: the patched trainer runs without the mx_driving patcher",
                         "pip install mx-driving==26.2.0.post2")
        if not self.npu_host or not (self.env.get("ASCEND_HOME_PATH") or self.env.get("ASCEND_TOOLKIT_HOME")):
            return Check(name, "SKIP", f"mx-driving {version} installed; importing it needs NPUs and CANN sourced")
        found, error = run_probe(MX_DRIVING_PROBE)
        if found is None:
            return Check(name, "FAIL", f"mx-driving {version}: `import mx_driving.patcher` fails: {error}",
                         "source CANN; put torch/lib on LD_LIBRARY_PATH (scripts/train_8p.sh does)")
        api = patcher_api(found["has_add"], found["builder"])
        if api is None:
            return Check(name, "FAIL", f"mx-driving {version}: patcher has neither Patcher nor default_patcher_builder",
                         "pip install mx-driving==26.2.0.post2")
        if not PORT_TOOL.is_file():  # an install without the repository's scripts/
            return Check(name, "PASS", f"mx-driving {version}: patcher API {api}; the patches it applies are not "
                         f"listed here ({PORT_TOOL} is missing); the training log's first lines name them")
        applied, error = run_probe(MX_PATCHER_PROBE)
        if applied is None:
            return Check(name, "FAIL", f"mx-driving {version}: the patched trainer's patcher step fails: {error}",
                         "DIT4DIT_MX_PATCHER=lean, default or off")
        return Check(name, "WARN" if applied["problem"] else "PASS", applied["line"],
                     "DIT4DIT_MX_PATCHER=off trains without it" if applied["problem"] else "")

    def check_npu_processes(self) -> Check:
        name = "npu_processes"
        if skip := self.skip_without_npu(name):
            return skip
        visible = {(c.npu, c.chip) for c in self.npus().visible}
        holding = [p for p in npu_topology.parse_npu_processes(self.npu_smi or "") if (p.npu, p.chip) in visible]
        if not holding:
            return Check(name, "PASS", "no process holds a visible NPU")
        listed = ", ".join(f"pid {p.pid} {p.name} on NPU {p.npu} chip {p.chip} ({p.memory_mb} MB)" for p in holding)
        return Check(name, "WARN", f"{len(holding)} process(es) still hold NPUs: {listed}",
                     "stop them (a crashed run leaves ranks behind: kill <pid>) or use other devices")

    def check_hccl(self) -> Check:
        name = "hccl_env"
        if skip := self.skip_without_npu(name):
            return skip
        problems = hccl_problems(self.env)
        if problems:
            return Check(name, "FAIL", "; ".join(problems), "fix or unset these variables (scripts/train_8p.sh sets sound defaults)")
        shown = [f"{v}={self.env[v]}" for v in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_EVENT_TIMEOUT") if v in self.env]
        return Check(name, "PASS", ", ".join(shown) or "HCCL timeouts at CANN defaults (scripts/train_8p.sh raises the connect timeout)")

    def check_hccl_ports(self) -> Check:
        name = "hccl_ports"
        if skip := self.skip_without_npu(name):
            return skip
        return Check(name, *hccl_ports.port_check(self.env))

    def check_time_plan(self) -> Check:
        name = "time_plan"
        if self.cfg is None or self.base_model_problems:
            return Check(name, "SKIP", "needs a loadable config and a complete base model")
        framework, trainer, data = self.sections()
        try:
            line = time_plan.plan_line(self.base_model, framework, trainer, data,
                                       mixture_views(data.data_mix, data.data_config), self.args.assumed_mfu)
        except (KeyError, TypeError, ValueError, OSError) as err:  # a snapshot whose configs lack what is counted
            return Check(name, "SKIP", f"no FLOP count: {type(err).__name__}: {err} in {self.base_model}'s configs")
        return Check(name, "PASS", line)

    def check_config(self) -> Check:
        if self.cfg is None:
            return Check("config", "FAIL", self.cfg_error, "pass --config_yaml FILE")
        return Check("config", "PASS", f"{self.config_yaml} loads")

    def check_base_model(self) -> Check:
        if self.base_model_problems:
            return Check("base_model", "FAIL", " | ".join(self.base_model_problems))
        return Check("base_model", "PASS", f"{self.base_model} is complete")

    def check_memory(self) -> Check:
        name = "device_memory"
        if self.cfg is None or self.base_model_problems:
            return Check(name, "SKIP", "needs a loadable config and a complete base model")
        framework, trainer, data = self.sections()
        views = mixture_views(data.data_mix, data.data_config)
        kind = "npu" if self.topo or not host_kind.nvidia_present() else "cuda"
        free_gib = self.args.device_memory_gib
        if free_gib is None:
            free_gib = memory_plan.device_free_gib(kind, self.topo)
        run = memory_plan.launch_run(self.args.launch_config, self.num_processes, self.num_machines)
        try:
            result = memory_plan.plan(self.base_model, framework, trainer, data, run, views, free_gib or 0.0, kind)
        except (KeyError, TypeError, ValueError) as err:  # a snapshot whose configs lack the sizes the estimate reads
            return Check(name, "WARN", f"no estimate: {type(err).__name__}: {err} in {self.base_model}'s configs",
                         "check transformer/config.json against the snapshot's")
        if result is None:
            return Check(name, "SKIP", "base model has no *.safetensors to count parameters from")
        est = result.current
        need = (f"need ~{est.total_gib:.1f} GiB/device (weights+optimizer {est.static_gib:.1f}, activations "
                f"{est.activation_gib:.1f} at batch {data.per_device_batch_size}, ZeRO-{run.zero_stage}, "
                f"{run.processes} process(es))")
        if free_gib is None:
            return Check(name, "SKIP", need + "; no device memory to compare with (pass --device_memory_gib GIB)")
        lines = result.lines()
        if result.fits:
            return Check(name, "PASS", lines[0])
        best = result.best  # the last line names it; the fix gives its flags
        return Check(name, "FAIL", lines[0], f"{best.change}: {' '.join(best.flags)}" if best else lines[-1],
                     more=tuple(lines[1:-1]))

    def check_prompt_store(self) -> Check:
        name = "prompt_store"
        if self.cfg is None or self.base_model_problems:
            return Check(name, "SKIP", "needs a loadable config and a complete base model")
        from DiT4DiT.doctor.store_estimate import estimate  # pyarrow; keeps `--help` instant

        try:
            est = estimate(str(self.config_yaml), str(self.base_model))
        except (DiT4DiTError, OSError, ValueError, KeyError) as err:  # a dataset's meta, the text encoder's config
            return Check(name, "WARN", f"could not estimate the store: {type(err).__name__}: {err}",
                         "fix what it names, or see the traceback: python -m DiT4DiT.doctor.store_estimate CONFIG BASE_MODEL")
        if not est["prompt_cache"]:
            return Check(name, "PASS", "framework.cosmos25.prompt_cache is off: prompts are encoded every step")
        if not est["datasets"]:
            return Check(name, "WARN", "no dataset of datasets.vla_data.data_mix found, so no instruction to count",
                         "set datasets.vla_data.data_root_dir")
        need = max(est["store_bytes"] - est["stored_bytes"], 0)
        size = (f"{est['instructions']} instructions x {est['embedding_bytes'] / 2**20:.1f} MiB = "
                f"{est['store_bytes'] / GIB:.1f} GiB at {est['store_dir']} ({est['stored_bytes'] / GIB:.1f} stored, "
                f"{est['free_bytes'] / GIB:.1f} free)")
        fix = f"set framework.cosmos25.prompt_store_dir to a folder with {need / GIB:.0f}+ GiB free (local disk or a shared filesystem)"
        if need > est["free_bytes"]:
            return Check(name, "FAIL", size, fix)
        if need > 0.8 * est["free_bytes"]:
            return Check(name, "WARN", size + ": the disk would be over 80% used", fix)
        return Check(name, "PASS", size)

    def check_latent_store(self) -> Check:
        """framework.cosmos25.latent_cache's store for the data mix: its size before anything is written, the disk,
        and how long its build takes on this job's processes (stated also when the key is off: what it would be)."""
        name = "latent_store"
        if self.cfg is None or self.base_model_problems:
            return Check(name, "SKIP", "needs a loadable config and a complete base model")
        from DiT4DiT.doctor.store_estimate import ASSUMED_VAE_SHARE_OF_PEAK, latent_store_estimate

        framework, _, data = self.sections()
        device = self.topo.soc if self.topo is not None else "a3"
        try:
            est = latent_store_estimate(framework.cosmos25, data, self.base_model, self.world_size, device)
        except (DiT4DiTError, OSError, ValueError, KeyError) as err:
            return Check(name, "WARN", f"could not estimate the store: {type(err).__name__}: {err}",
                         "fix what it names, or see the traceback: python -m DiT4DiT.doctor.store_estimate CONFIG BASE_MODEL")
        if not est["datasets"]:
            return Check(name, "SKIP", "no dataset of datasets.vla_data.data_mix found, so no clip to count")
        size = (f"{est['clips']} clips ({est['episodes']} episodes of {est['datasets']} datasets) x "
                f"{est['clip_bytes'] / 2**10:.0f} KiB = {est['store_bytes'] / GIB:.1f} GiB at {est['store_dir']} "
                f"({est['stored_bytes'] / GIB:.1f} stored, {est['free_bytes'] / GIB:.1f} free); building it: "
                f"{est['clip_tflop']:.2f} TFLOP of VAE per clip, about {est['build_hours']:.1f} h on "
                f"{est['processes']} {device.upper()} process(es) at {ASSUMED_VAE_SHARE_OF_PEAK:.0%} of peak "
                "(python -m DiT4DiT.tools.latent_store builds it ahead and prints its pace)")
        if not est["latent_cache"]:
            return Check(name, "PASS", f"framework.cosmos25.latent_cache is off (every step decodes and encodes "
                                       f"video); on, it would hold {size}")
        need = max(est["store_bytes"] - est["stored_bytes"], 0)
        fix = (f"set framework.cosmos25.latent_store_dir to a folder with {need / GIB:.0f}+ GiB free (local disk "
               "or a shared filesystem)")
        if need > est["free_bytes"]:
            return Check(name, "FAIL", size, fix)
        if need > 0.8 * est["free_bytes"]:
            return Check(name, "WARN", size + ": the disk would be over 80% used", fix)
        return Check(name, "PASS", size)

    def check_host_memory(self) -> Check:
        name = "host_memory"
        if self.cfg is None or self.base_model_problems:
            return Check(name, "SKIP", "needs a loadable config and a complete base model")
        framework, _, data = self.sections()
        host = HostNeed.of(data, framework.cosmos25.torch_dtype, self.base_model, self.num_processes,
                           mixture_views(data.data_mix, data.data_config))
        need, detail, meminfo = host.total, host.describe(), read_meminfo()
        if "MemAvailable" not in meminfo:
            return Check(name, "SKIP", detail + "; /proc/meminfo unreadable")
        available = meminfo["MemAvailable"]
        fix = "lower datasets.vla_data.num_workers or --num_processes per node, or free host memory"
        if need > meminfo["MemTotal"]:
            return Check(name, "FAIL", f"{detail} > {meminfo['MemTotal'] / GIB:.0f} GiB of host memory", fix)
        if need > available:
            return Check(name, "WARN", f"{detail} > {available / GIB:.0f} GiB available", fix)
        return Check(name, "PASS", f"{detail} <= {available / GIB:.0f} GiB available")

    def run(self) -> list[Check]:
        return [self.check_python(), self.check_nodes(), self.check_devices(), self.check_npu_processes(), self.check_soc(),
                self.check_cann(), self.check_cann_python(), self.check_versions(), self.check_libraries(), self.check_mx_driving(), self.check_hccl(),
                self.check_hccl_ports(), self.check_npu_network(),
                self.check_config(), self.check_base_model(), self.check_memory(), self.check_time_plan(),
                self.check_prompt_store(),
                self.check_latent_store(), self.check_host_memory()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.doctor", description=__doc__.split("\n")[0])
    parser.add_argument("--num_processes", type=int, help="processes per node (default: visible NPUs, or 1)")
    parser.add_argument("--num_machines", type=int, default=1, help="nodes of the job (default 1)")
    parser.add_argument("--base_model", help="Cosmos-Predict2.5 snapshot folder (default: the config's)")
    parser.add_argument("--config_yaml", help=f"training config (default: {NPU_DEFAULTS[0]}, CPU host: {CPU_DEFAULTS[0]})")
    parser.add_argument("--soc", choices=npu_topology.SOCS, help=f"override A2/A3 detection (also {npu_topology.SOC_ENV})")
    parser.add_argument("--device_memory_gib", type=float,
                        help="free memory per device to plan for (default: npu-smi's free HBM, or nvidia-smi's)")
    parser.add_argument("--launch_config", default=memory_plan.ZERO2_LAUNCH_CONFIG,
                        help="accelerate config the run will use, for its ZeRO stage (default: %(default)s)")
    parser.add_argument("--assumed_mfu", type=float, default=time_plan.ASSUMED_MFU,
                        help="MFU the time plan projects with (default %(default)s; bench/device_check.py measures one)")
    args = parser.parse_args(argv)
    if not 0 < args.assumed_mfu <= 1:
        parser.error(f"--assumed_mfu {args.assumed_mfu}: give a fraction in (0, 1]")
    if args.num_processes is not None and args.num_processes < 1:
        parser.error("--num_processes must be at least 1")
    if args.num_machines < 1:
        parser.error("--num_machines must be at least 1")
    if args.device_memory_gib is not None and (problem := memory_plan.device_memory_problem(args.device_memory_gib)):
        parser.error(problem)
    return run_main(lambda: report(Doctor(args, dict(os.environ)).run()))


def report(checks: list) -> int:
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if c.status == "FAIL"]
    print(f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "no failures")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
