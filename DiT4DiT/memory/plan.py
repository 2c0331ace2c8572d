"""Does a training run fit its devices, and if not, the smallest change that does.

The launcher's preflight and the doctor (both above this module) call `plan()` with the config's framework,
trainer and data sections, the number of processes, the ZeRO stage and the free memory of the smallest device
(npu-smi, nvidia-smi, or --device_memory_gib). A run fits when the memory estimate (DiT4DiT/memory/estimate.py)
stays within HEADROOM of that memory. When it does not, each change is tried on a copy of the sections (`Setup`),
in this order, alone and then stacked: activation checkpointing; the text encoder's layers checkpointed (when it
trains); a smaller per-device batch with gradient accumulation raised to keep the global batch; ZeRO-3; ZeRO-2 with
the optimizer state in host memory; more processes (a full node, then more nodes). These change how the run
computes, not what it learns. Last, and labelled as such, what changes the experiment: the text encoder frozen
(when it trains). Every candidate is one line with its estimate and the exact launcher flags.
`fits_table()` is docs/full-size.md's table (`python -m DiT4DiT.doctor.memory_table`).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection, TrainerSection
from DiT4DiT.facts import AUTO, in_repo, module_paths
from DiT4DiT.memory.estimate import PARTS, Estimate, estimate_training_memory, is_frozen
from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape

# The allocator's fragmentation and the runtime's own memory (context, HCCL/NCCL buffers) take about a tenth.
HEADROOM = 0.9
ZERO2_LAUNCH_CONFIG = "DiT4DiT/config/deepseeds/deepspeed_zero2.yaml"
ZERO3_LAUNCH_CONFIG = "DiT4DiT/config/deepseeds/deepspeed_zero3.yaml"
ZERO2_OFFLOAD_LAUNCH_CONFIG = "DiT4DiT/config/deepseeds/deepspeed_zero2_offload.yaml"
TEXT_ENCODER = PARTS["text_encoder"]
PER_NODE = {"npu": 16, "cuda": 8}  # devices of an Atlas 800T A3 node / a usual GPU node
# A device's memory as a user may give it (--device_memory_gib): the largest devices today have under 300 GiB.
MAX_DEVICE_MEMORY_GIB = 1024.0


def device_memory_problem(gib: float) -> str | None:
    """What is wrong with a device memory given by hand (inf, 1e30 or NaN made any run "fit" or FAIL for nothing)."""
    if not 0 < gib <= MAX_DEVICE_MEMORY_GIB:
        return (f"--device_memory_gib {gib:g}: expected the free memory of one device in GiB, more than 0 and at most "
                f"{MAX_DEVICE_MEMORY_GIB:g} (e.g. 60 for a 64 GB NPU)")
    return None


@dataclass(frozen=True)
class Device:
    name: str
    kind: str  # npu or cuda
    memory_gib: float  # what a process can have of it: the total the runtime reports


# A die's 64 GB of HBM is not all the runtime's to give: an idle A3 die or A2 device shows about 3 GB in use in
# npu-smi (vllm-ascend issues #12980, #2534), and torch_npu reports a total capacity of 61.27 GiB on an A3 die
# (sglang issue #29838) and 60.96 GiB on an A2 device (vllm-ascend issue #5020). On a live host the doctor and the
# preflight read npu-smi's free HBM instead.
DEVICES = {
    "a3": Device("A3 die, 61.3 GiB", "npu", 61.27),
    "a2": Device("A2, 61.0 GiB", "npu", 60.96),
    "gpu80": Device("80 GB GPU", "cuda", 79.6),  # H100/A100 80 GB: nvidia-smi reports 81559 MiB
    "h200": Device("H200, 141 GB", "cuda", 140.4),  # nvidia-smi reports 143771 MiB
}


@dataclass(frozen=True)
class Run:
    """What a launch decides besides the config."""

    processes_per_node: int
    machines: int = 1
    zero_stage: int = 2
    offload_optimizer: bool = False  # DeepSpeed's optimizer state (and its step) in host memory

    @property
    def processes(self) -> int:
        return self.processes_per_node * self.machines


@dataclass(frozen=True)
class Setup:
    """What the plan's changes vary: the trainer's and the data's sections (the framework stays), and the launch."""

    trainer: TrainerSection
    data: DatasetsVlaDataSection
    run: Run


@dataclass(frozen=True)
class Option:
    change: str  # what changes, in words
    flags: list[str]  # the launcher flags that make it (scripts/train_8p.sh / accelerate-launched trainer keys)
    estimate: Estimate
    fits: bool
    changes_experiment: bool = False  # what the run learns changes (a frozen text encoder), not only how it runs


@dataclass
class Plan:
    free_gib: float
    current: Estimate
    fits: bool
    options: list[Option] = field(default_factory=list)

    @property
    def limit_gib(self) -> float:
        return HEADROOM * self.free_gib

    @property
    def best(self) -> Option | None:
        """The first change of the run (not of the experiment) that fits."""
        return next((o for o in self.options if o.fits and not o.changes_experiment), None)

    @property
    def experiment_change(self) -> Option | None:
        return next((o for o in self.options if o.changes_experiment), None)

    def lines(self) -> list[str]:
        """The plan for people: the verdict, then every candidate with its numbers and flags."""
        head = (f"need ~{self.current.total_gib:.1f} GiB/device (weights+optimizer {self.current.static_gib:.1f}, "
                f"activations {self.current.activation_gib:.1f}) vs {self.limit_gib:.1f} GiB usable "
                f"({HEADROOM:.0%} of {self.free_gib:.1f} GiB free)")
        if self.fits:
            return [f"fits as is: {head}"]
        lines = [f"does not fit: {head}"]
        for option in self.options:
            mark = "fits" if option.fits else "not enough"
            host = (f" (+{option.estimate.host_offload_gib:.1f} GiB of host memory per process)"
                    if option.estimate.host_offload_gib else "")
            lines.append(f"  {mark}: {option.change}: ~{option.estimate.total_gib:.1f} GiB{host}  "
                         f"{' '.join(option.flags)}")
        best, experiment = self.best, self.experiment_change
        if best:
            lines.append(f"smallest change that fits: {best.change}: {' '.join(best.flags)}")
        elif experiment is not None and experiment.fits:
            lines.append(f"no change of the run fits; one of the experiment does: {experiment.change}: "
                         f"{' '.join(experiment.flags)}")
        else:
            lines.append("no change tried fits: freeze more (trainer.freeze_modules) or use devices with more memory")
        return lines


def trains_text_encoder(trainer: TrainerSection) -> bool:
    return not is_frozen(TEXT_ENCODER, trainer.freeze_modules)


def _experiment_changes(setup: Setup):
    """(kind, in words, flags, setup) for what changes the experiment: the text encoder frozen, when it trains
    (its prompts then come from the prompt store)."""
    trainer = setup.trainer
    if trains_text_encoder(trainer):
        frozen = ",".join([*module_paths(trainer.freeze_modules), TEXT_ENCODER])
        yield ("experiment", "CHANGES THE EXPERIMENT: the text encoder frozen (its prompts from the prompt store)",
               [f"--trainer.freeze_modules={frozen}"], replace(setup, trainer=replace(trainer, freeze_modules=frozen)))


def _candidates(setup: Setup, kind: str):
    """(kind of change, in words, flags, setup) for each single change, cheapest kind first; within a kind from the
    mildest to the strongest."""
    trainer, data, run = setup.trainer, setup.data, setup.run
    batch, accumulation = data.per_device_batch_size, trainer.gradient_accumulation_steps
    if not trainer.enable_gradient_checkpointing:
        yield ("checkpointing", "activation checkpointing on", ["--trainer.enable_gradient_checkpointing=true"],
               replace(setup, trainer=replace(trainer, enable_gradient_checkpointing=True)))
    if trains_text_encoder(trainer) and not trainer.text_encoder_gradient_checkpointing:
        yield ("text_encoder_checkpointing", "the text encoder's layers checkpointed",
               ["--trainer.text_encoder_gradient_checkpointing=true"],
               replace(setup, trainer=replace(trainer, text_encoder_gradient_checkpointing=True)))
    for smaller in sorted((b for b in range(1, batch) if batch % b == 0), reverse=True):
        steps = accumulation * batch // smaller
        yield ("batch", f"per-device batch {smaller} x {steps} accumulation steps (global batch "
               f"{smaller * steps * run.processes} kept)",
               [f"--per_device_batch_size={smaller}", f"--trainer.gradient_accumulation_steps={steps}"],
               Setup(replace(trainer, gradient_accumulation_steps=steps), replace(data, per_device_batch_size=smaller),
                     run))
    if run.zero_stage < 3:
        yield ("zero3", "ZeRO-3 (weights and gradients sharded too)", [f"--launch_config={ZERO3_LAUNCH_CONFIG}"],
               replace(setup, run=Run(run.processes_per_node, run.machines, 3)))
    if run.zero_stage in (1, 2) and not run.offload_optimizer:
        yield ("offload", "ZeRO-2 with the optimizer state in host memory (AdamW steps on the host's CPUs)",
               [f"--launch_config={ZERO2_OFFLOAD_LAUNCH_CONFIG}"],
               replace(setup, run=replace(run, zero_stage=2, offload_optimizer=True)))
    node = PER_NODE[kind]
    per_node = max(run.processes_per_node, node)
    for machines in (run.machines, run.machines * 2, run.machines * 4):
        if per_node * machines > run.processes:
            flags = [f"--num_processes={per_node}"] + ([f"--num_machines={machines}"] if machines > 1 else [])
            yield ("processes", f"{machines} node(s) x {per_node} processes (global batch "
                   f"x{per_node * machines / run.processes:g})", flags,
                   replace(setup, run=replace(run, processes_per_node=per_node, machines=machines)))


def plan(base_model: Path, framework: FrameworkSection, trainer: TrainerSection, data: DatasetsVlaDataSection,
         run: Run, views: int, free_gib: float, kind: str = "npu") -> Plan | None:
    """Whether the run fits devices with `free_gib` free and, if not, the options (None without safetensors):
    per kind of change the mildest that fits (or the strongest), then, if none fits alone, the kinds stacked."""
    def estimate(s: Setup) -> Estimate | None:
        return estimate_training_memory(base_model, framework, s.trainer, s.data, s.run.processes, views,
                                        zero_stage=s.run.zero_stage, device_kind=kind,
                                        offload_optimizer=s.run.offload_optimizer)

    def option_estimate(s: Setup) -> Estimate:
        found = estimate(s)
        assert found is not None  # the snapshot whose safetensors gave the current setup's estimate
        return found

    if trainer.gradient_checkpointing_blocks == AUTO:  # what the trainer will resolve it to on these devices
        blocks = fewest_recomputed_blocks(base_model, framework, trainer, data, run.processes, views,
                                          HEADROOM * free_gib, zero_stage=run.zero_stage, kind=kind)
        trainer = replace(trainer, gradient_checkpointing_blocks=str(
            read_pipeline_shape(base_model).num_blocks if blocks is None else blocks))
    setup = Setup(trainer, data, run)
    current = estimate(setup)
    if current is None:
        return None
    limit = HEADROOM * free_gib
    result = Plan(free_gib, current, current.total_gib <= limit)
    if result.fits:
        return result
    by_kind: dict[str, Option] = {}
    for group, change, flags, candidate in _candidates(setup, kind):
        if group in by_kind and by_kind[group].fits:
            continue
        est = option_estimate(candidate)
        by_kind[group] = Option(change, flags, est, est.total_gib <= limit)
    result.options += by_kind.values()
    if result.best is None:  # stack the kinds in order (each: its mildest that fits, else its strongest)
        stacked, changes = setup, []
        stacked_flags: dict[str, str] = {}
        while steps := list(_candidates(stacked, kind)):
            group = steps[0][0]
            variants = [(s, option_estimate(s[3])) for s in steps if s[0] == group]
            (_, change, flags, stacked), est = next((v for v in variants if v[1].total_gib <= limit), variants[-1])
            changes.append(change)
            stacked_flags.update(flag.split("=", 1) for flag in flags)
            if len(changes) > 1:
                result.options.append(Option(" + ".join(changes), [f"{k}={v}" for k, v in stacked_flags.items()], est,
                                             est.total_gib <= limit))
            if est.total_gib <= limit or group == "processes":
                break
    for _, change, flags, candidate in _experiment_changes(setup):  # listed last, never stacked with the others
        est = option_estimate(candidate)
        result.options.append(Option(change, flags, est, est.total_gib <= limit, changes_experiment=True))
    return result


def fewest_recomputed_blocks(base_model: Path, framework: FrameworkSection, trainer: TrainerSection,
                             data: DatasetsVlaDataSection, processes: int, views: int, limit_gib: float, *,
                             zero_stage: int = 2, kind: str = "npu") -> int | None:
    """trainer.gradient_checkpointing_blocks=auto: the fewest transformer blocks to recompute for the estimate to
    stay within `limit_gib` per device (the others keep their activations, and the step their time), or None when
    recomputing all of them is not enough (or the snapshot has no safetensors). Estimates fall as blocks are added,
    so a bisection finds it."""
    def fits(blocks: int) -> bool:
        est = estimate_training_memory(base_model, framework, replace(trainer, gradient_checkpointing_blocks=str(blocks)),
                                       data, processes, views, zero_stage=zero_stage, device_kind=kind)
        return est is not None and est.total_gib <= limit_gib

    low, high = 0, read_pipeline_shape(base_model).num_blocks
    if not fits(high):
        return None
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle + 1, high)
    return low


def nvidia_free_mib() -> list[float]:
    """Free MiB of each GPU nvidia-smi lists (every GPU of the host, in its order); [] where it does not answer."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [float(v) for v in out.stdout.split() if v.replace(".", "", 1).isdigit()] if out.returncode == 0 else []


def nvidia_free_gib() -> float | None:
    """Free memory of the fullest visible GPU from nvidia-smi, or None where it does not answer."""
    values = nvidia_free_mib()
    return min(values) / 1024 if values else None


def device_free_gib(kind: str, topo=None) -> float | None:
    """Free memory of the fullest device this node will use: npu-smi's HBM (`topo`, npu_topology) or nvidia-smi."""
    if kind == "npu" and topo is not None:
        free = [c.hbm_free_mb for c in topo.visible if c.hbm_free_mb is not None]
        return min(free) / 1024 if free else None
    return nvidia_free_gib() if kind == "cuda" else None


def read_launch_config(launch_config: str | Path) -> dict:
    """An accelerate config file (--launch_config) as a mapping, read with the bounds of every YAML a user gives
    (DiT4DiT/yaml_files.py: a 3 GB sparse file was read whole); UsageError naming the file otherwise."""
    import yaml

    from DiT4DiT.errors import UsageError
    from DiT4DiT.yaml_files import checked_yaml_text

    path = in_repo(launch_config)
    text = checked_yaml_text(path, UsageError, "launch config (an accelerate config file)", top=yaml.MappingNode)
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: not readable YAML ({' '.join(str(error).split())[:200]}); give an accelerate "
                         "config file, e.g. DiT4DiT/config/deepseeds/deepspeed_zero2.yaml") from None


def launch_deepspeed_config(launch_config: str | Path) -> dict:
    """The DeepSpeed settings of an accelerate config: its deepspeed_config, with the JSON its
    deepspeed_config_file names (as "file"); {} without DeepSpeed."""
    import json

    from DiT4DiT.errors import UsageError
    from DiT4DiT.yaml_files import MAX_BYTES

    path = in_repo(launch_config)
    ds = (read_launch_config(path).get("deepspeed_config") or {}) if path.is_file() else {}
    ds_file = in_repo(ds.get("deepspeed_config_file", ""))
    if ds_file.is_file() and ds_file.stat().st_size > MAX_BYTES:
        raise UsageError(f"{ds_file}: {ds_file.stat().st_size:,} bytes, more than the {MAX_BYTES >> 20} MiB a "
                         f"DeepSpeed config may have ({path}'s deepspeed_config_file); give the right file")
    return {**ds, "file": json.loads(ds_file.read_text()) if ds_file.is_file() else {}}


def launch_zero_stage(launch_config: str | Path) -> int:
    """The ZeRO stage of an accelerate config: deepspeed_config.zero_stage, else its deepspeed_config_file's
    zero_optimization.stage; 0 without DeepSpeed (plain DDP: nothing shared)."""
    ds = launch_deepspeed_config(launch_config)
    if "zero_stage" in ds:
        return int(ds["zero_stage"])
    return int(ds["file"].get("zero_optimization", {}).get("stage", 0))


def launch_run(launch_config: str | Path, processes_per_node: int, machines: int = 1) -> Run:
    """The Run of a launch: its processes and what its accelerate config sets (ZeRO stage, the optimizer offloaded
    to host memory: deepspeed_config.offload_optimizer_device or the JSON's offload_optimizer.device)."""
    ds = launch_deepspeed_config(launch_config)
    device = ds.get("offload_optimizer_device") or ds["file"].get("zero_optimization", {}).get(
        "offload_optimizer", {}).get("device")
    return Run(processes_per_node, machines, launch_zero_stage(launch_config), device == "cpu")


def fits_table(base_model: Path, configs: dict[str, Path], processes: int = 16) -> list[str]:
    """Markdown rows: each config on each device with `processes` processes, ZeRO-2 -> fits as is / fits with ...;
    a config that turns checkpointing on gets a second row without it."""
    from DiT4DiT.config.schema import load_config
    from DiT4DiT.memory.estimate import mixture_views

    header = "| config | " + " | ".join(d.name for d in DEVICES.values()) + " |"
    rows = [header, "|" + "---|" * (len(DEVICES) + 1)]
    variants = []
    for name, path in configs.items():
        typed = load_config(path, [])
        framework, trainer, data = typed.framework, typed.trainer, typed.datasets.vla_data
        variants.append((name, framework, trainer, data))
        if trainer.enable_gradient_checkpointing:  # and what the plan says without it
            variants.append((f"{name} without checkpointing", framework,
                             replace(trainer, enable_gradient_checkpointing=False), data))
    for name, framework, trainer, data in variants:
        views = mixture_views(data.data_mix, data.data_config)
        cells = []
        for device in DEVICES.values():
            per_node = min(processes, PER_NODE[device.kind])
            run = Run(per_node, max(processes // per_node, 1))
            result = plan(base_model, framework, trainer, data, run, views, device.memory_gib, device.kind)
            if result is None:  # .bin weights (the folder checks accept them): nothing to count
                from DiT4DiT.errors import UsageError

                raise UsageError(f"{base_model}: no *.safetensors in {', '.join(PARTS)}; the table reads the weights' "
                                 "sizes from safetensors headers: convert the weights, or leave --base_model out for "
                                 "the real 2B sizes")
            of = f"of {result.limit_gib:.0f} GiB"
            if result.fits:
                cells.append(f"fits as is ({result.current.total_gib:.0f} {of})")
            elif result.best:
                cells.append(f"fits with {result.best.change} ({result.best.estimate.total_gib:.0f} {of}; "
                             f"{result.current.total_gib:.0f} as is): `{' '.join(result.best.flags)}`")
            elif (experiment := result.experiment_change) is not None and experiment.fits:
                cells.append(f"does not fit ({result.current.total_gib:.0f} {of}); fits if the experiment changes: "
                             f"{experiment.change} ({experiment.estimate.total_gib:.0f}): `{' '.join(experiment.flags)}`")
            else:
                cells.append(f"does not fit ({result.current.total_gib:.0f} {of})")
        checkpointing = "checkpointing" if trainer.enable_gradient_checkpointing else "no checkpointing"
        rows.append(f"| {name} (batch {data.per_device_batch_size}, {views} view(s), {checkpointing}) | "
                    + " | ".join(cells) + " |")
    return rows


ORIGINAL_CONFIGS = {
    "robotwin": "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml",
    "libero": "DiT4DiT/config/libero/dit4dit_libero.yaml",
    "robocasa_gr1": "DiT4DiT/config/robocasa/dit4dit_robocasa_gr1.yaml",
    "g1": "DiT4DiT/config/real_robot/dit4dit_g1.yaml",
}
