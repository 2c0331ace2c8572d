"""Everything a launch needs, decided in one place: host, nodes, values, environment, command, problems.

`build()` takes the parsed options and the machine's facts (`Facts`: environment, host detection, routes,
interfaces, package folders, cores), so every decision can be tested in-process with made-up machines.
`dry_run()` renders the plan for people; DiT4DiT/launch/run.py runs it.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from DiT4DiT.facts import DETERMINISTIC_ENV, REPO, in_repo
from DiT4DiT.host import npu_topology
from DiT4DiT.launch import environment, host_kind, network, preflight, values
from DiT4DiT.launch.environment import Environment
from DiT4DiT.launch.host_kind import Host
from DiT4DiT.launch.options import TRAINER_KEYS, Options, UsageError, option_names
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

TRAIN_ENTRY = "DiT4DiT/training/train.py"
DEFAULTS = {  # host kind -> (trainer config, accelerate config)
    "cpu": ("DiT4DiT/config/tiny/dit4dit_tiny.yaml", "DiT4DiT/config/deepseeds/cpu.yaml"),
    "gpu": ("DiT4DiT/config/robotwin/dit4dit_robotwin.yaml", "DiT4DiT/config/deepseeds/deepspeed_zero2.yaml"),
}
NODE_SOURCES = {  # option -> (variables read when it is not given, fallback)
    "num_machines": (("NNODES", "SLURM_NNODES"), "1"),
    "machine_rank": (("NODE_RANK", "SLURM_NODEID"), "0"),
    "main_process_ip": (("MASTER_ADDR",), ""),
    "main_process_port": (("MASTER_PORT",), "29500"),
    "net_if": (("DIT4DIT_NET_IF",), ""),
}
ZERO_COPY = "TORCH_HCCL_ZERO_COPY"
INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "HCCL_IF_IP", "NCCL_SOCKET_IFNAME")


def _package_lib(name: str) -> str | None:
    """<package>/lib of an installed package, found without importing it (torch_npu needs CANN to import)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "lib")


def _device_free_gib(host: Host) -> float | None:
    from DiT4DiT.memory import plan as memory_plan

    return memory_plan.device_free_gib(host.kind, host.topology)  # npu-smi's answer when the host was detected


@dataclass
class Facts:
    """What the plan asks the machine; tests pass their own."""

    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    detect: Callable[[str | None, str | None], Host] = host_kind.detect
    route_interface: Callable[[str], tuple[str | None, str]] = network.route_interface
    interfaces: Callable[[], list[str]] = network.interfaces
    ipv4_address: Callable[[str], str | None] = network.ipv4_address
    package_lib: Callable[[str], str | None] = _package_lib
    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    python: str = sys.executable
    python_version: tuple[int, ...] = tuple(sys.version_info[:3])
    device_free_gib: Callable[[Host], float | None] = lambda host: _device_free_gib(host)


@dataclass
class Plan:
    host: Host
    python: str
    python_version: str
    shown: dict[str, tuple[str, str]]  # launcher value -> (value, source)
    config: dict[str, values.Value]
    forwarded: list[str]
    env: Environment
    command: list[str]
    log: str
    run_dir: str
    cann_scripts: list[str] = field(default_factory=list)
    cann: str = ""
    network: str = ""
    timeouts: str = ""
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)  # the memory plan, for the dry run

    @property
    def per_node(self) -> int:
        return int(self.shown["num_processes"][0])

    @property
    def machines(self) -> int:
        return int(self.shown["num_machines"][0])

    def stall_kill_after(self) -> int:
        """Seconds after which the launcher SIGKILLs a rank of its node that is still stopped (0: never): after the
        healthy ranks have named it (they kill a stalled rank of their own node), for a rank alone on its node."""
        from DiT4DiT.training.heartbeat import named_within

        timeout = float(self.config[values.STALL_TIMEOUT_KEY].value)
        return 0 if timeout <= 0 or self.per_node * self.machines < 2 else math.ceil(named_within(timeout)) + 5


def _node_values(opts: Options, env: dict[str, str]) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for name, (variables, fallback) in NODE_SOURCES.items():
        if (given := opts.given(name)) is not None:
            found[name] = (given, f"option --{name}")
            continue
        var = next((v for v in variables if env.get(v)), None)
        found[name] = (env[var], var) if var else (fallback, "default")
    machines, rank, port = (found[n] for n in ("num_machines", "machine_rank", "main_process_port"))
    if not machines[0].isdigit() or int(machines[0]) < 1:
        raise UsageError(f"num_machines={machines[0]} ({machines[1]}): expected a positive integer")
    if not rank[0].isdigit() or int(rank[0]) >= int(machines[0]):
        raise UsageError(f"machine_rank={rank[0]} ({rank[1]}): expected 0 to {int(machines[0]) - 1} for "
                         f"{machines[0]} machine(s)")
    if not port[0].isdigit() or not 1 <= int(port[0]) <= 65535:
        raise UsageError(f"main_process_port={port[0]} ({port[1]}): expected 1-65535")
    if int(machines[0]) > 1 and not found["main_process_ip"][0]:
        raise UsageError(f"{machines[0]} machines need the address of machine 0: --main_process_ip=IP (or MASTER_ADDR)")
    return found


def _interface(plan: Plan, facts: Facts) -> None:
    """The network interface for collectives: given, derived from the route to machine 0, or a problem."""
    name, source = plan.shown["net_if"]
    if not name and plan.machines > 1:
        main_ip = plan.shown["main_process_ip"][0]
        derived, why = facts.route_interface(main_ip)
        if derived is None:
            plan.problems.append(f"{plan.machines} machines need the network interface for collectives: pass "
                                 f"--net_if=NAME (or DIT4DIT_NET_IF=NAME); {why}")
            return
        name, source = derived, f"derived: `ip route get {main_ip}`"
        plan.shown["net_if"] = (name, source)
    if not name:
        for var in INTERFACE_VARIABLES:  # yours, when no interface was chosen: kept and shown
            plan.env.keep_yours(var)
        return
    if name not in facts.interfaces():
        plan.problems.append(f"network interface {name} ({source}) does not exist here; interfaces: "
                             f"{' '.join(facts.interfaces())}")
        return
    address = facts.ipv4_address(name)
    plan.network = f"{name} ({source}), IPv4 {address or 'none'}"
    plan.env.force("GLOO_SOCKET_IFNAME", name, "net_if")
    if plan.host.kind == "cuda":
        plan.env.force("NCCL_SOCKET_IFNAME", f"={name}", "net_if, exact match")
    if plan.host.kind == "npu":
        if address is None:
            plan.problems.append(f"network interface {name} has no IPv4 address (HCCL_IF_IP needs one); pick another --net_if")
            return
        plan.env.force("HCCL_SOCKET_IFNAME", f"={name}", "net_if, exact match")
        plan.env.force("HCCL_IF_IP", address, f"IPv4 of {name}")


def _zero_copy(plan: Plan, facts: Facts, option: str | None) -> None:
    """TORCH_HCCL_ZERO_COPY off unless asked for (--hccl_zero_copy, or exported). CANN 9.0's HCCL guide calls it a
    trial feature, not supported for production: it needs AI_CPU expansion, and AllReduce/ReduceScatter overwrite
    their input. A3 only; on A2 it fails."""
    env, exported = plan.env, facts.env.get(ZERO_COPY)
    if plan.host.soc != "a3":
        if option == "1":
            plan.problems.append("--hccl_zero_copy=1: zero-copy collectives are A3-only; drop the option (or pass "
                                 "--soc=a3 if this is an A3 node)")
        elif exported is not None:
            env.force(ZERO_COPY, None, "A2")
            plan.notes.append(f"unsetting {ZERO_COPY}: it is A3-only and fails on A2 (pass --soc=a3 if this is an A3 node)")
        return
    if option is not None:
        env.force(ZERO_COPY, "1" if option == "1" else None, f"option --hccl_zero_copy={option}")
    elif exported is not None:
        env.keep_yours(ZERO_COPY)
    else:
        env.force(ZERO_COPY, None, f"off by default: a trial feature of CANN 9.0's HCCL, not for production; ask "
                                   f"with --hccl_zero_copy=1 or export {ZERO_COPY}=1 after an A/B run (docs/ascend.md)")
    if env.value(ZERO_COPY) == "1":
        plan.notes.append(f"{ZERO_COPY}=1 ({env.settings[ZERO_COPY].source}): zero-copy collectives are a trial "
                          "feature of CANN 9.0's HCCL, not for production; compare loss and grad norm over a few steps "
                          "with it off first (docs/ascend.md)")


def _ascend(plan: Plan, facts: Facts, entry: Path, zero_copy: str | None) -> None:
    env = plan.env
    plan.cann_scripts, plan.cann = preflight.cann_scripts(facts.env)
    if not plan.cann:
        plan.problems.append(f"CANN not found: no {' '.join(preflight.cann_candidates(facts.env))}; install CANN 9.0 "
                             "or set CANN_SET_ENV=/path/to/set_env.sh")
    for name, value in environment.ASCEND_DEFAULTS.items():
        env.default(name, value, "Ascend default")
    for name, value in environment.MINDSPEED_A3.items():
        env.default(name, value, environment.MINDSPEED_A3_SOURCE)
    collective = plan.config[values.COLLECTIVE_TIMEOUT_KEY]
    derived = environment.hccl_exec_timeout(int(collective.value))
    env.default("HCCL_EXEC_TIMEOUT", str(derived), f"90% of {values.COLLECTIVE_TIMEOUT_KEY}")
    hccl = env.value("HCCL_EXEC_TIMEOUT") or ""
    plan.timeouts = (f"process group {collective.value} s ({values.COLLECTIVE_TIMEOUT_KEY}, {collective.source}) > "
                     f"HCCL_EXEC_TIMEOUT {hccl} s ({env.settings['HCCL_EXEC_TIMEOUT'].source})")
    if not hccl.isdigit() or not 0 < int(hccl) < int(collective.value):
        plan.problems.append(f"HCCL_EXEC_TIMEOUT={hccl} (yours) must be a number of seconds below the process-group "
                             f"timeout {values.COLLECTIVE_TIMEOUT_KEY}={collective.value}, so that HCCL reports a hung "
                             f"collective first: unset it (the launcher derives {derived}) or raise "
                             f"--{values.COLLECTIVE_TIMEOUT_KEY}")
    _zero_copy(plan, facts, zero_copy)
    libs = [lib for lib in (facts.package_lib("torch"), facts.package_lib("torch_npu")) if lib and os.path.isdir(lib)]
    if facts.package_lib("torch_npu") is None:
        plan.problems.append(f"torch_npu is not installed for {plan.python}: pip install -r requirements-npu.txt")
    if libs:  # libc10.so / libtorch_npu.so for mx_driving and torch_npu extensions
        env.force("LD_LIBRARY_PATH", ":".join(libs), "this Python's torch/lib and torch_npu/lib first", prepend=True)
    if problem := preflight.patch_problem(entry):
        plan.problems.append(problem)
    mode = facts.env.get("DIT4DIT_MX_PATCHER", "default")
    if mode not in preflight.MX_PATCHER_MODES:
        plan.problems.append(f"DIT4DIT_MX_PATCHER={mode}: expected lean, default or off")


def build(opts: Options, facts: Facts | None = None) -> Plan:
    """The whole plan; UsageError or ConfigError (exit 2) when the options or the config cannot work at all,
    plan.problems for what preflight found."""
    facts = facts or Facts()
    problems = []
    too_old = host_kind.python_problem(facts.python_version)
    if too_old:
        raise UsageError(too_old)
    npu_topology.soc_override(opts.given("soc"))  # a bad DIT4DIT_SOC is refused on every host, not only an NPU one
    host = facts.detect(opts.given("device"), opts.given("soc"))
    if host.problem:
        problems.append(host.problem)
    shown: dict[str, tuple[str, str]] = {}
    if device := opts.given("device"):
        shown["device"] = (device, "option --device")
    config_default, launch_default = DEFAULTS["cpu" if host.kind == "cpu" else "gpu"]
    for name, default in (("config_yaml", config_default), ("launch_config", launch_default),
                          ("num_processes", str(max(host.visible, 1)))):
        given = opts.given(name)
        shown[name] = (given, f"option --{name}") if given else (default, f"host default: {host.kind}")
    if soc := opts.given("soc"):
        shown["soc"] = (soc, "option --soc")
    shown.update(_node_values(opts, facts.env))
    config_yaml, launch_config = shown["config_yaml"][0], shown["launch_config"][0]
    if not in_repo(config_yaml).is_file():
        raise UsageError(f"config {config_yaml} not found ({shown['config_yaml'][1]})")
    if not in_repo(launch_config).is_file():
        problems.append(f"launch config {launch_config} not found ({shown['launch_config'][1]})")
    else:
        from DiT4DiT.memory.plan import read_launch_config

        read_launch_config(launch_config)  # bounded: accelerate would read any size whole
    config = values.resolve(str(in_repo(config_yaml)), opts.forwarded, option_names())

    per_node, machines, rank = (int(shown[n][0]) for n in ("num_processes", "num_machines", "machine_rank"))
    run_dir = f"{config['run_root_dir'].value}/{config['run_id'].value}"
    entry = facts.env.get("DIT4DIT_TRAIN_ENTRY", TRAIN_ENTRY)
    command = [facts.python, "-m", "accelerate.commands.launch", "--config_file", launch_config,
               "--num_processes", str(per_node * machines)]
    if machines > 1:
        command += ["--num_machines", str(machines), "--machine_rank", str(rank),
                    "--main_process_ip", shown["main_process_ip"][0], "--main_process_port", shown["main_process_port"][0]]
    command += [entry, "--config_yaml", config_yaml, *opts.forwarded]
    plan = Plan(host=host, python=facts.python, python_version=".".join(map(str, facts.python_version)), shown=shown,
                config=config, forwarded=opts.forwarded, env=Environment(facts.env), command=command,
                log=f"{run_dir}/train.log" if rank == 0 else f"{run_dir}/train.node{rank}.log",  # one log per node
                run_dir=run_dir, problems=problems)

    plan.env.default("WANDB_MODE", "offline", "launcher default")
    # Where triton is installed, importing deepspeed (the launcher and every rank of a DeepSpeed run) warms
    # inductor's pool of compile workers, processes that import torch again; nothing in training compiles.
    plan.env.default("TORCH_WARM_POOL", "0", "launcher default: nothing compiles")
    plan.env.force("PYTHONPATH", facts.env.get("PYTHONPATH", str(REPO)), "scripts/train_8p.sh: the repository first",
                   exported=False)
    if host.kind == "cpu":
        threads = environment.omp_threads(facts.cores, per_node)
        plan.env.default("OMP_NUM_THREADS", str(threads), f"{facts.cores} cores / {per_node} process(es) per node")
    entry_path = in_repo(entry)
    if host.kind == "npu" and not host.problem:
        _ascend(plan, facts, entry_path, opts.given("hccl_zero_copy"))
    elif not entry_path.is_file() and not opts.dry_run:
        plan.problems.append(f"trainer {entry} not found")
    if config[values.DETERMINISTIC_KEY].value == "True":
        for name, value in DETERMINISTIC_ENV.get(host.kind, {}).items():
            plan.env.default(name, value, values.DETERMINISTIC_KEY)
    if problem := preflight.device_problem(host, per_node, facts.env):
        plan.problems.append(problem)
    _interface(plan, facts)
    mix = config["datasets.vla_data.data_mix"]
    plan.problems += preflight.folder_problems(config["framework.cosmos25.base_model"].value,
                                               config["datasets.vla_data.data_root_dir"].value,
                                               mix.value if mix.source == "option" else None, REPO)
    _memory(plan, opts, facts)
    return plan


def _memory(plan: Plan, opts: Options, facts: Facts) -> None:
    """The memory plan against the devices' free memory (or --device_memory_gib): a problem when it does not fit."""
    given = opts.given("device_memory_gib")
    free = float(given) if given else (facts.device_free_gib(plan.host) if plan.host.kind != "cpu" else None)
    base_model = plan.config["framework.cosmos25.base_model"].value
    if free is None or not base_model or pipeline_folder_problems(base_model, relative_to=REPO):
        return  # nothing to plan with; preflight has named what is missing
    kind = plan.host.kind if plan.host.kind != "cpu" else "npu"
    try:
        lines, fits = preflight.memory_plan_lines(in_repo(plan.shown["config_yaml"][0]), plan.forwarded,
                                                  str(in_repo(base_model)), in_repo(plan.shown["launch_config"][0]),
                                                  plan.per_node, plan.machines, kind, free)
    except (KeyError, TypeError, ValueError) as err:  # a snapshot whose configs lack the sizes the estimate reads
        plan.notes.append(f"no memory plan: the estimate could not read {base_model} ({type(err).__name__}: {err})")
        return
    plan.memory = lines
    if not fits:
        plan.problems.append("device memory: " + "\n    ".join(lines))


def dry_run(plan: Plan) -> str:
    """The plan for people: what runs, with which values and environment, and where each value comes from."""
    host = plan.host
    lines = [f"python: {plan.python_version} ({plan.python})"]
    if host.kind == "npu":
        lines.append(f"host: npu ({host.soc.upper()}, {host.visible} of {host.total} devices visible); "
                     f"CANN: {plan.cann or 'not found'}")
    elif host.kind == "cuda":
        lines.append(f"host: cuda ({host.visible} of {host.total} devices visible); Ascend environment skipped")
    else:
        lines.append("host: cpu; Ascend environment skipped")
    lines.append(f"detected: {host.reason}")
    rank = plan.shown["machine_rank"][0]
    lines.append(f"nodes: {plan.machines} (this is machine {rank}), {plan.per_node} process(es) per node, "
                 f"{plan.per_node * plan.machines} in all")
    if plan.network:
        lines.append(f"network: {plan.network}")
    if plan.timeouts:
        lines.append(f"timeouts: {plan.timeouts}")
    lines.append("values:")
    options = {key: name for name, key in TRAINER_KEYS.items()}
    for name, (value, source) in plan.shown.items():
        if value:
            lines.append(f"  {name}={value}  ({source})")
    for key, item in plan.config.items():
        source = {"option": f"option --{options.get(key, key)}", "yaml": f"yaml {plan.shown['config_yaml'][0]}"}.get(
            item.source, item.source)
        lines.append(f"  {key}={item.value}  ({source})")
    lines.append("environment:")
    lines += [f"  {s.shown()}" for s in plan.env.settings.values() if s.value is not None or s.exported]
    lines.append(f"command (in {REPO}):")
    lines.append("  " + shlex.join(plan.command))
    lines.append(f"log: {plan.log}")
    if kill_after := plan.stall_kill_after():
        lines.append(f"stall kill: SIGKILL to a rank process of this node stopped for {kill_after} s "
                     "(trainer.stall_timeout_s and the heartbeat's look)")
    if plan.memory:
        lines.append("memory: " + "\n  ".join(plan.memory))
    return "\n".join(lines)
