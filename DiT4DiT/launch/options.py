"""The launcher's command line, parsed once by argparse: its own options, short names for trainer keys, and
any other `--a.b.c=value` trainer key passed through.

Only what the user typed is forwarded to the trainer, as `--key=value`; relative paths are made absolute
against the caller's directory (the launch itself runs in the repository root).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

from DiT4DiT.errors import UsageError
from DiT4DiT.launch.host_kind import KINDS
from DiT4DiT.host.npu_topology import SOCS

PROG = "scripts/train_8p.sh"
# Short name -> trainer config key.
TRAINER_KEYS = {
    "max_train_steps": "trainer.max_train_steps",
    "save_interval": "trainer.save_interval",
    "per_device_batch_size": "datasets.vla_data.per_device_batch_size",
    "data_mix": "datasets.vla_data.data_mix",
    "data_config": "datasets.vla_data.data_config",
    "data_root_dir": "datasets.vla_data.data_root_dir",
    "base_model": "framework.cosmos25.base_model",
    "framework_name": "framework.name",
    "freeze_module_list": "trainer.freeze_modules",
    "action_video_freq_ratio": "datasets.vla_data.action_video_freq_ratio",
    "run_root_dir": "run_root_dir",
    "run_id": "run_id",
}
POSITIVE = ("num_processes", "num_machines", "main_process_port", "max_train_steps", "save_interval",
            "per_device_batch_size", "action_video_freq_ratio")
PATH_OPTIONS = ("config_yaml", "launch_config", "base_model", "data_root_dir", "run_root_dir")
PATH_KEYS = {"datasets.vla_data.cache_dir", *(TRAINER_KEYS[o] for o in PATH_OPTIONS if o in TRAINER_KEYS)}
RUN_ID = re.compile(r"^[A-Za-z0-9._+=@,-]+$")
_MISSING = object()  # `--name` typed without a value


@dataclass
class Options:
    launcher: dict[str, str]  # launcher-only options that were given
    forwarded: list[str] = field(default_factory=list)  # trainer overrides, --key=value
    dry_run: bool = False

    def given(self, name: str) -> str | None:
        return self.launcher.get(name)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False, usage="%(prog)s [--option=value ...] [--a.b.c=value ...] [--dry-run]",
        description="Launch DiT4DiT training: host detection, Ascend environment, preflight, `accelerate launch`, a log.",
        epilog="Any other trainer key passes through: --a.b.c=value or --a.b.c value (top-level keys too, --seed=1). "
               "Environment: PYTHON (interpreter), DIT4DIT_TRAIN_ENTRY (script launched instead of "
               "DiT4DiT/training/train.py), ASCEND_INSTALL_ROOT (/usr/local/Ascend), CANN_SET_ENV (an explicit "
               "set_env.sh); a variable of the environment block that you exported keeps your value. Exit status: 2 "
               "for usage and preflight problems, else that of accelerate launch.")
    add = p.add_argument
    launcher = p.add_argument_group("launcher options")
    opt = launcher.add_argument
    opt("--device", metavar="npu|cuda|cpu", help="override the host detection (npu when `npu-smi info` lists devices)")
    opt("--num_processes", metavar="N", help="processes PER NODE (default: visible NPUs or GPUs; cpu: 1). A3 node: 16, A2: 8")
    opt("--config_yaml", metavar="FILE", help="trainer config (npu/cuda: robotwin, cpu: tiny)")
    opt("--launch_config", metavar="FILE", help="accelerate config (npu/cuda: deepspeed_zero2.yaml, cpu: cpu.yaml)")
    opt("--soc", metavar="a2|a3", help="override the A2/A3 detection (also DIT4DIT_SOC)")
    opt("--num_machines", metavar="N", help="nodes in the job (else NNODES, SLURM_NNODES; 1)")
    opt("--machine_rank", metavar="R", help="this node's rank, 0 = the main node (else NODE_RANK, SLURM_NODEID; 0)")
    opt("--main_process_ip", metavar="IP", help="address of machine 0, needed with 2+ nodes (else MASTER_ADDR)")
    opt("--main_process_port", metavar="P", help="its port (else MASTER_PORT; 29500)")
    opt("--hccl_zero_copy", metavar="0|1", help="TORCH_HCCL_ZERO_COPY for A3 (default: unset, off; a trial "
        "feature of CANN 9.0's HCCL, A/B it first: docs/ascend.md); an exported value is used when this is not given")
    opt("--device_memory_gib", metavar="GIB", help="free memory per device that the memory plan checks against "
        "(else npu-smi's free HBM, or nvidia-smi's; a CPU host is not checked)")
    opt("--net_if", metavar="NAME", help="network interface for collectives (else DIT4DIT_NET_IF; with 2+ nodes "
        "derived from `ip route get MAIN_IP`)")
    trainer = p.add_argument_group("short names for trainer keys (passed only when given)")
    for name, key in TRAINER_KEYS.items():
        trainer.add_argument(f"--{name}", metavar="VALUE", nargs="?", const=_MISSING, help=key)
    for action in launcher._group_actions:
        action.nargs, action.const = "?", _MISSING
    add("--dry-run", "--dry_run", dest="dry_run", action="store_true",
        help="print host, values, environment, command and preflight result; start nothing")
    return p


def _absolute(value: str, cwd: Path) -> str:
    return value if value.startswith("/") else str(cwd / value)


def _check(name: str, value) -> str:
    if value is _MISSING or value == "":
        raise UsageError(f"--{name} needs a value: --{name}=VALUE (see --help)")
    if name in POSITIVE and not re.fullmatch(r"[1-9][0-9]*", value):
        raise UsageError(f"--{name}={value}: expected a positive integer")
    if name == "device_memory_gib" and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", value):
        raise UsageError(f"--device_memory_gib={value}: expected a number of GiB, e.g. 60")
    if name == "device_memory_gib":
        from DiT4DiT.memory.plan import device_memory_problem

        if device_memory_problem(float(value)):
            raise UsageError(device_memory_problem(float(value)))
    if name == "device" and value not in KINDS:
        raise UsageError(f"--device={value}: expected one of {', '.join(KINDS)}")
    if name == "hccl_zero_copy" and value not in ("0", "1"):
        raise UsageError(f"--hccl_zero_copy={value}: expected 0 (off) or 1 (on, A3 only)")
    if name == "soc" and value not in SOCS:
        raise UsageError(f"--soc={value}: expected a2 or a3")
    if name == "run_id" and (not RUN_ID.match(value) or value in (".", "..")):
        raise UsageError(f"--run_id={value}: use letters, digits and . _ - + = @ , only "
                         "(it names the folder <run_root_dir>/<run_id>)")
    return value


def _pass_through(extras: list[str], cwd: Path) -> list[str]:
    """`--a.b=c`, `--a.b c` and a bare `--flag` as --key=value items, paths made absolute."""
    items, i = [], 0
    while i < len(extras):
        token = extras[i]
        if not token.startswith("--") or token == "--":
            raise UsageError(f"unexpected argument '{token}'; options look like --name=value (see --help)")
        name, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 < len(extras) and not extras[i + 1].startswith("--"):
                value, i = extras[i + 1], i + 1
            else:
                value = "true"
        if name in PATH_KEYS and value:
            value = _absolute(value, cwd)
        items.append(f"--{name}={value}")
        i += 1
    return items


def parse(argv: list[str], cwd: Path) -> Options:
    """The command line as Options; UsageError (exit 2) for anything it cannot take."""
    args, extras = parser().parse_known_args(argv)
    launcher, forwarded = {}, []
    for name, value in vars(args).items():
        if name == "dry_run" or value is None:
            continue
        value = _check(name, value)
        # A data_mix with a slash is a dataset folder or mixture file, so it follows the caller's directory too.
        if name in PATH_OPTIONS or (name == "data_mix" and "/" in value):
            value = _absolute(value, cwd)
        if name in TRAINER_KEYS:
            # Quoted, so the trainer's YAML parsing keeps run_id=20250101 a string.
            forwarded.append(f"--{TRAINER_KEYS[name]}=" + (f"'{value}'" if name == "run_id" else value))
        else:
            launcher[name] = value
    passed = _pass_through(extras, cwd)
    typed = {item.split("=", 1)[0] for item in forwarded}
    for item in passed:
        if item.split("=", 1)[0] in typed:
            raise UsageError(f"{item.split('=', 1)[0]} is given twice (by its short name and as a key); give it once")
    return Options(launcher, forwarded + passed, args.dry_run)


def option_names() -> list[str]:
    return [*TRAINER_KEYS, "device", "num_processes", "config_yaml", "launch_config", "soc", "num_machines",
            "machine_rank", "main_process_ip", "main_process_port", "net_if", "hccl_zero_copy",
            "device_memory_gib"]
