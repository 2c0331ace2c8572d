"""One prepared check of a device lent for a few minutes: step times, FLOPs, MFU, memory, and the risky paths.

    python bench/device_check.py --full-size [--out device_check.json]   # one CUDA GPU or one NPU die, <= 10 min
    python bench/device_check.py --tiny                                  # CPU, under a minute (the test runs it)

Sections (each under its own time limit; the JSON is rewritten after each one, so a failure or a kill keeps what
was measured; a failed section is recorded with its error and the next one runs):
  environment   device, versions, the bf16 dense peak used for MFU
  build         the model: --full-size is bench_model's random-weight 2B Cosmos + 7B-shaped text encoder + Wan VAE
                + DiT-B head, bf16, 3 views of 224 px, 5 frames, 512-token prompts (about 20 GB of weights)
  flops         the step's FLOPs at batch 1 counted analytically from the model as configured (DiT4DiT/doctor/step_flops.py:
                feature and video passes, forward and backward, VAE encode, action head; what MFU divides by), with
                torch's FlopCounterMode's figure beside it (on an NPU it misses matmul_backward and reads low); one
                transformer forward counted against the analytic formula
  store         prompt store on/off and early exit on/off (bench_model.measure); then the text encoder is
                released, as training does
  steps         forward + backward + AdamW under bf16 autocast at batch 1, 2, 4: median step time, MFU (of the
                analytic count: "mfu_flops": "analytic"), peak memory
  repeat        diffusers' repeat_interleave(1, dim=3) of K/V on a tensor over 2**22 elements, forward + backward,
                against our processor's path (no repeat): same gradient, both timed
  plan          the memory plan's estimate per batch next to the steps' measured peaks, and its verdict for the
                device's free memory (full size: the real sizes from a shapes-only snapshot, DiT4DiT/base_model/cosmos_2b.py)
  checkpointing batch 4 with the Cosmos transformer's blocks checkpointed and without: step time, peak memory
  deterministic the Cosmos transformer's video pass at batch 1 with trainer.deterministic's torch part off, then on,
                each in a fresh process ("fresh_process": true; Ascend honours only a thread's first setting): the
                cost of trainer.deterministic (its HCCL_DETERMINISTIC part needs collectives: not in this time)
  latency       a served request at batch 1 by stage (bench_latency.py's stages: preprocess, prompt, VAE encode,
                feature pass, action sampling, unnormalise), median of a few after a warm-up, plain and with
                real-time chunking's guidance (the Policy and its stage clock, no websocket)
  patcher       the steps at batch 1 with DIT4DIT_MX_PATCHER=off, then inside the mx_driving patcher as the
                patched train.py enters it (its own helper, the mode DIT4DIT_MX_PATCHER names, default unless set):
                both times and both start-up lines; skipped with a line where mx_driving is not installed
  rope          the fused RoPE our processor calls on NPU (torch.ops.npu.npu_rotary_mul) against diffusers'
                apply_rotary_emb at the RoboTwin shape (4, 16, 1176, 128), forward and backward: max errors and
                times; off NPU our processor's path is diffusers' function itself (compared, said so)
  checksum      the same weights summed on the device 20 times (float32 and float64, deterministic off and on, each
                setting in a fresh process): identical or not (why the end-of-run replica check compares bytes on
                the host)
  profile       trainer.profile_steps' profiler (the trainer's own; torch_npu.profiler on NPU) over 3 batch-1
                steps: its top operators by self time, kept in the JSON
  env_ab        the launcher's MindSpeed-MM A3 variables (OMP_NUM_THREADS, COMBINED_ENABLE, ACLNN_CACHE_LIMIT), each
                unset in turn against all set: a fresh process per setting (they are read at start-up) timing 4
                Cosmos blocks at the real width (tiny: 2 narrow ones), forward and backward
  zero2         with >= 2 devices: a DeepSpeed ZeRO-2 run (10 steps) with overlap_comm on and off, losses and grad
                norms compared, in the environment the launcher's plan exports on this host (TASK_QUEUE_ENABLE,
                HCCL_*, ...); skipped with a line on 1 device (the environment is recorded either way)
The device comes from DiT4DiT.serving.device.select_device: an NPU where torch_npu loads, else CUDA, else CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import runpy
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent
sys.path[:0] = [str(REPO), str(REPO.parent)]

import bench_model  # noqa: E402
from tiny_runs import TINY_CONFIG  # noqa: E402

from DiT4DiT.config.schema import load_config  # noqa: E402
from DiT4DiT.facts import DETERMINISTIC_ENV, latent_frame_count  # noqa: E402
from DiT4DiT.model.framework import build_framework  # noqa: E402
from DiT4DiT.model.freezing import freeze_modules  # noqa: E402
from DiT4DiT.base_model import cosmos_2b  # noqa: E402
from DiT4DiT.model.modules.node_store import Ranks  # noqa: E402
from DiT4DiT.serving.device import select_device  # noqa: E402
from DiT4DiT.doctor.step_flops import peak_tflops, training_step_flops, transformer_forward_flops  # noqa: E402
from DiT4DiT.tools.synthetic_inputs import make_examples, transformer_inputs  # noqa: E402
from DiT4DiT.tools.tiny_cosmos import write_tiny_pipeline  # noqa: E402

TOTAL_BUDGET_S = 600
# Every section's limit; together they fit the total (tests/test_device_check.py checks the sum).
SECTION_LIMIT_S = {"environment": 15, "build": 100, "flops": 20, "store": 30, "steps": 65, "plan": 15,
                   "checkpointing": 30, "deterministic": 60, "patcher": 20, "latency": 10, "repeat": 15, "rope": 20,
                   "checksum": 30, "zero2": 50, "profile": 30, "env_ab": 90}
ROPE_SHAPE = {"full": (4, 16, 1176, 128), "tiny": (2, 4, 64, 32)}  # (batch, heads, tokens, head_dim)
CHECKSUM_REPEATS = 20
ZERO2_STEPS = 10
TINY_LIMIT_S = 300  # the whole --tiny run (about a minute and a half on a quiet 2-core CPU)
BATCHES = (1, 2, 4)
# env_ab's workload: (heads, blocks, latent frames, patches high, patches wide, text tokens); full = robotwin's
ENV_AB_SHAPE = {"full": (16, 4, 2, 14, 42, 512), "tiny": (2, 2, 1, 4, 6, 16)}
ENV_AB_STEPS = 5


class SectionTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    """SIGALRM ends a section that runs past its limit (checked between Python bytecodes, so between kernels)."""
    def expire(signum, frame):
        raise SectionTimeout(f"over its {seconds} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Report:
    """Sections' results, written to `path` after each one."""

    def __init__(self, path: Path, deadline: float):
        self.path, self.deadline, self.data = path, deadline, {"sections": {}}

    def run(self, name: str, limit: int, section, *args):
        left = int(self.deadline - time.monotonic())
        if left < 5:
            result = {"status": "skipped", "reason": "the total time budget is spent"}
        else:
            start = time.monotonic()
            try:
                with time_limit(min(limit, left)):
                    result = {"status": "ok", **section(*args)}
            except Exception as error:  # one section's failure must not lose the others
                result = {"status": "failed", "error": f"{type(error).__name__}: {error}",
                          "where": traceback.format_exc(limit=-3).strip().splitlines()[-3:]}
            result["seconds"] = round(time.monotonic() - start, 1)
        self.data["sections"][name] = result
        self.path.write_text(json.dumps(self.data, indent=1, default=str))
        print(f"[{name}] {result['status']}" + (f": {result.get('error') or result.get('reason')}"
                                                 if result["status"] != "ok" else ""), flush=True)
        return result


def environment(device: torch.device) -> dict:
    name = getattr(torch, device.type).get_device_name(device) if device.type != "cpu" else platform.processor() or "cpu"
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("torch-npu", "diffusers", "transformers", "deepspeed", "accelerate"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    count = getattr(torch, device.type).device_count() if device.type != "cpu" else 1
    return {"device": str(device), "name": name, "device_count": count, "peak_bf16_tflops": peak_tflops(name),
            "versions": versions}


def build(state: dict, full_size: bool, device: torch.device, tmp: Path) -> dict:
    store = [f"framework.cosmos25.prompt_store_dir={tmp / 'prompt_store'}", "framework.cosmos25.prompt_cache=true"]
    if full_size:
        with bench_model.substituted_backbone(bench_model.random_full_size_components(device)):
            cfg = load_config(None, bench_model.FULL_SIZE_OVERRIDES + [f"trainer.freeze_modules={bench_model.FROZEN}"]
                              + store)
            model = build_framework(cfg)
        views = 3
    else:
        pipeline = write_tiny_pipeline(tmp / "tiny")
        cfg = load_config(TINY_CONFIG, [f"framework.cosmos25.base_model={pipeline}"] + store)
        model = build_framework(cfg)
        views = 1
    model.to(device)
    freeze_modules(model, cfg.trainer.freeze_modules)
    state.update(cfg=cfg, model=model, views=views,
                 text_encoder_config=model.backbone_interface.extractor.text_encoder.config.to_dict())
    # Every instruction of every batch below is stored now; the store section then releases the encoder.
    instructions = sorted({e["lang"] for e in make_examples(cfg, batch=max(BATCHES))})
    model.backbone_interface.extractor.prepare_prompts(instructions, Ranks(), release_encoder=False)
    extractor = model.backbone_interface.extractor
    params = {name: sum(p.numel() for p in module.parameters())
              for name, module in (("transformer", extractor.transformer), ("text_encoder", extractor.text_encoder),
                                   ("vae", extractor.vae), ("action_head", model.action_model))}
    return {"parameters": params, "image": f"{views} view(s) of {cfg.datasets.vla_data.image_size} px",
            "frames": model.backbone_interface.num_frames_out}


def step_shape(state: dict, batch: int) -> dict:
    cfg = state["cfg"]
    size = int(cfg.datasets.vla_data.image_size) // state["model"].backbone_interface.extractor.spatial_factor
    return dict(batch=batch, latent_frames=latent_frame_count(state["model"].backbone_interface.num_frames_out, 4),
                height=size, width=size * state["views"], text_tokens=int(cfg.framework.cosmos25.max_sequence_length))


def analytic_step_flops(state: dict, batch: int) -> dict[str, float]:
    """The step's model FLOPs at `batch`, per part, counted from the built model's configs and the config as it
    trains (DiT4DiT/doctor/step_flops.py: feature and video passes, forward and backward, VAE encode, action head, the text
    encoder where it runs every step)."""
    from DiT4DiT.config.sections import ConfigSections
    from DiT4DiT.config.typed import section

    extractor = state["model"].backbone_interface.extractor
    typed = section(state["cfg"], ConfigSections)
    flops = training_step_flops(dict(extractor.transformer.config), dict(extractor.vae.config),
                                state["text_encoder_config"], typed.framework, typed.trainer, typed.datasets.vla_data,
                                state["views"], batch)
    return {**flops.parts, "total": flops.total, "recomputed_by_checkpointing": flops.recomputed}


def train_step(state: dict, examples, optimizer, device) -> float:
    return bench_model.step_seconds(state["model"], examples, optimizer, device)


def flops(state: dict, device: torch.device) -> dict:
    """The step's FLOPs at batch 1, counted analytically from the model as configured (what MFU divides by) and by
    torch's FlopCounterMode beside it; and one transformer forward counted against the analytic formula.
    FlopCounterMode counts matmuls, convolutions and the SDPA kernels it knows (CUDA's flash/efficient ones, not
    CPU's or NPU's fused attention), and on an NPU not the backward of torch_npu's matmul (no formula for
    `matmul_backward`): its step figure reads low there."""
    from torch.utils.flop_counter import FlopCounterMode

    model = state["model"]
    examples = make_examples(state["cfg"], batch=1, views=state["views"])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    with FlopCounterMode(display=False) as step_counter:
        train_step(state, examples, optimizer, device)
    analytic = analytic_step_flops(state, 1)
    state["flops_per_sample"] = analytic["total"]
    transformer = model.backbone_interface.extractor.transformer
    shape = step_shape(state, 1)
    inputs = transformer_inputs(transformer.config, batch=1, frames=shape["latent_frames"], height=shape["height"],
                                width=shape["width"], text_tokens=shape["text_tokens"], device=device,
                                dtype=transformer.dtype)
    with torch.no_grad(), FlopCounterMode(display=False) as forward_counter:
        transformer(**inputs)
    forward = transformer_forward_flops(dict(transformer.config), blocks=transformer.config.num_layers, **shape)
    counted, step_counted = forward_counter.get_total_flops(), step_counter.get_total_flops()
    return {"step_analytic_per_sample": analytic, "step_counted_per_sample": step_counted,
            "step_counted_over_analytic": round(step_counted / analytic["total"], 4),
            "forward_counted": counted, "forward_analytic_linear": forward["linear"],
            "forward_analytic_attention": forward["attention"],
            "counted_over_analytic_linear": round(counted / forward["linear"], 4),
            "counted_over_analytic_total": round(counted / sum(forward.values()), 4)}


def store(state: dict, device: torch.device, steps: int) -> dict:
    examples = make_examples(state["cfg"], batch=1, views=state["views"])
    result = bench_model.measure(state["model"], examples, device, steps, block=max(1, steps // 2))
    if device.type == "cpu":  # measure() releases the encoder itself on an accelerator
        state["model"].backbone_interface.extractor.prepare_prompts([e["lang"] for e in examples], Ranks(),
                                                                    release_encoder=True)
    median = result["median"]
    return {"median_ms": {k: round(v * 1e3, 2) for k, v in median.items()},
            "peak_mib": {k: round(v) for k, v in result["peak"].items()},
            "store_off_over_on": round(median["store off, early exit"] / median["store on, early exit"], 3),
            "full_feature_pass_over_early_exit": round(median["store on, full feature pass"]
                                                       / median["store on, early exit"], 3)}


def steps(state: dict, device: torch.device, peak: float | None, count: int) -> dict:
    model, rows = state["model"], {}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    per_sample = state.get("flops_per_sample")
    for batch in BATCHES:
        examples = make_examples(state["cfg"], batch=batch, views=state["views"])
        if device.type != "cpu":
            getattr(torch, device.type).reset_peak_memory_stats(device)
        for _ in range(2):  # warm-up: allocator, kernels, optimizer state
            train_step(state, examples, optimizer, device)
        median = statistics.median(train_step(state, examples, optimizer, device) for _ in range(count))
        flops_step = per_sample * batch if per_sample else None  # every FLOP of the step scales with the batch
        achieved = flops_step / median / 1e12 if flops_step else None
        rows[batch] = {"step_ms": round(median * 1e3, 2), "tflops": float(f"{achieved:.4g}") if achieved else None,
                       "mfu": round(achieved / peak, 4) if achieved and peak else None,
                       "peak_mib": round(bench_model.peak_memory_mib(device))}
        rows["steps_measured"] = count
        rows["mfu_flops"] = "analytic"  # DiT4DiT/doctor/step_flops.py, not FlopCounterMode (see the flops section)
        state["steps"] = rows  # kept even if a larger batch fails (out of memory)
    return rows


def plan(state: dict, device: torch.device, tmp: Path, full_size: bool) -> dict:
    """The memory plan's prediction for this run next to the peaks the steps section measured: the estimate per
    batch (one process, no DeepSpeed: the step here is plain AdamW), and whether the plan says it fits this
    device's free memory. The full-size model's sizes come from a shapes-only snapshot of the real one."""
    from dataclasses import replace

    from DiT4DiT.memory import plan as memory_plan
    from DiT4DiT.config.sections import ConfigSections
    from DiT4DiT.config.typed import section
    from DiT4DiT.memory.estimate import estimate_training_memory
    from DiT4DiT.tools.full_size_cosmos import write_shapes_only

    base = write_shapes_only(tmp / "shapes") if full_size else tmp / "tiny"
    typed, views, rows = section(state["cfg"], ConfigSections), state["views"], {}
    framework, trainer, data = typed.framework, typed.trainer, typed.datasets.vla_data
    kind = "cpu" if device.type == "cpu" else ("cuda" if device.type == "cuda" else "npu")
    for batch in BATCHES:
        est = estimate_training_memory(base, framework, trainer, replace(data, per_device_batch_size=batch), 1, views,
                                       zero_stage=0, device_kind=kind)
        measured = (state.get("steps", {}).get(batch) or {}).get("peak_mib")
        rows[batch] = {"estimate_mib": round(est.total_gib * 1024), "measured_peak_mib": measured,
                       "measured_over_estimate": round(measured / (est.total_gib * 1024), 3) if measured else None}
    if device.type != "cpu":
        free_gib = getattr(torch, device.type).mem_get_info(device)[0] / 2**30
        result = memory_plan.plan(base, framework, trainer, data, memory_plan.Run(1, zero_stage=0), views, free_gib,
                                  kind)
        rows["plan_for_config"] = result.lines()
    return rows


def checkpointing(state: dict, device: torch.device, count: int, batch: int = 4) -> dict:
    """Step time and peak memory at batch 4 with the Cosmos transformer's blocks checkpointed (diffusers' switch on
    the transformer, which the video pass runs) and without."""
    model = state["model"]
    transformer = model.backbone_interface.extractor.transformer
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    examples = make_examples(state["cfg"], batch=batch, views=state["views"])
    rows = {}
    try:
        for name, on in (("off", False), ("on", True)):
            transformer.enable_gradient_checkpointing() if on else transformer.disable_gradient_checkpointing()
            if device.type != "cpu":
                getattr(torch, device.type).reset_peak_memory_stats(device)
            train_step(state, examples, optimizer, device)  # warm-up
            median = statistics.median(train_step(state, examples, optimizer, device) for _ in range(count))
            rows[name] = {"step_ms": round(median * 1e3, 2), "peak_mib": round(bench_model.peak_memory_mib(device))}
    finally:
        transformer.disable_gradient_checkpointing()
    rows["time_on_over_off"] = round(rows["on"]["step_ms"] / rows["off"]["step_ms"], 3)
    rows["peak_on_over_off"] = round(rows["on"]["peak_mib"] / rows["off"]["peak_mib"], 3)
    return rows


def repeat(device: torch.device, elements_over: int = 2**22) -> dict:
    """K/V as diffusers' Cosmos processor holds them, (B, heads, S, head_dim), sized just over 2**22 elements."""
    heads, head_dim = 16, 128
    tokens = elements_over // (heads * head_dim) + 64
    kv = torch.randn(1, heads, tokens, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn_like(kv)

    def run(repeated: bool) -> tuple[float, torch.Tensor]:
        kv.grad = None
        bench_model.synchronize(device)
        start = time.perf_counter()
        out = kv.repeat_interleave(kv.size(3) // kv.size(3), dim=3) if repeated else kv
        (out * weight).float().sum().backward()
        bench_model.synchronize(device)
        return time.perf_counter() - start, kv.grad.clone()

    run(True), run(False)  # warm-up
    (with_repeat, grad_repeat), (without, grad) = run(True), run(False)
    return {"elements": kv.numel(), "over_2_22": kv.numel() > 2**22, "with_repeat_ms": round(with_repeat * 1e3, 3),
            "without_ms": round(without * 1e3, 3), "same_gradient": bool(torch.equal(grad_repeat, grad))}


def batch1_timer(state: dict, device: torch.device, count: int):
    """A function giving the median of `count` batch-1 steps after one warm-up step (kernels chosen for the
    setting in force), with one optimizer and one batch for every call, so two settings are compared alike."""
    optimizer = torch.optim.AdamW([p for p in state["model"].parameters() if p.requires_grad], lr=1e-5)
    examples = make_examples(state["cfg"], batch=1, views=state["views"])

    def median_step() -> float:
        train_step(state, examples, optimizer, device)
        return statistics.median(train_step(state, examples, optimizer, device) for _ in range(count))
    return median_step


def deterministic(full_size: bool, count: int, limit: int) -> dict:
    """Median step time of the Cosmos transformer's video pass (forward and backward: what dominates a step) with
    trainer.deterministic's torch part off, then on, each in a fresh process: Ascend takes only the first
    use_deterministic_algorithms setting of a thread (torch_npu's deterministic_computing_apis.md)."""
    times = {setting: fresh_process("deterministic", setting, full_size, limit // 2, count)["step_s"]
             for setting in ("off", "on")}
    return {"step_ms": {k: round(v * 1e3, 2) for k, v in times.items()}, "fresh_process": True,
            "on_over_off": round(times["on"] / times["off"], 3), "steps_measured": count,
            "what": "the Cosmos transformer's video pass at batch 1 (forward + backward, bf16 autocast)"}


def deterministic_worker(device: torch.device, full_size: bool, count: int) -> dict:
    """In the fresh process, with the setting already in force: the transformer (the full-size one built on the
    device, or the tiny one), its median forward + backward at batch 1 after one warm-up."""
    from diffusers import CosmosTransformer3DModel

    config = dict(cosmos_2b.TRANSFORMER_CONFIG) if full_size else None
    with tempfile.TemporaryDirectory() as tmp:
        if config is None:
            config = json.loads((write_tiny_pipeline(Path(tmp) / "tiny") / "transformer" / "config.json").read_text())
            config = {k: v for k, v in config.items() if not k.startswith("_")}
        with torch.device(device):
            transformer = CosmosTransformer3DModel(**config).to(torch.bfloat16 if full_size else torch.float32).train()
    side = (224 if full_size else 32) // 8
    inputs = transformer_inputs(transformer.config, batch=1, frames=2, height=side, width=side * (3 if full_size else 1),
                                text_tokens=512 if full_size else 16, device=device, dtype=transformer.dtype)

    def step() -> float:
        bench_model.synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=full_size):
            transformer(**inputs)[0].float().square().mean().backward()
        bench_model.synchronize(device)
        return time.perf_counter() - start

    step()
    return {"step_s": statistics.median(step() for _ in range(count))}


def patcher_helper() -> dict:
    """The patched train.py's patcher step (PATCHER_HELPER of scripts/port_to_npu.py, as the doctor loads it):
    its functions by name."""
    namespace = {"contextlib": contextlib, "importlib": importlib, "logging": logging, "os": os, "sys": sys}
    exec(runpy.run_path(str(REPO.parent / "scripts" / "port_to_npu.py"))["PATCHER_HELPER"], namespace)
    return namespace


def patcher(state: dict, device: torch.device, count: int) -> dict:
    """Median batch-1 step time with DIT4DIT_MX_PATCHER=off, then inside the patcher in the mode a run would
    enter (DIT4DIT_MX_PATCHER, default unless set), each through the patched trainer's own helper, whose start-up
    lines are recorded. Off comes first: API 2.0 patches stay for the rest of the process once applied (the
    sections after this one run with them, as training does). mx_driving's import changes ASCEND_CUSTOM_OPP_PATH
    after this device has started, so the times are the patches' own cost, not that of another operator build."""
    mode = os.environ.get("DIT4DIT_MX_PATCHER", "default")
    mode = "default" if mode == "off" else mode  # "on" is the mode a run would enter when it is not switched off
    if mode not in ("lean", "default"):
        raise ValueError(f"DIT4DIT_MX_PATCHER={mode!r}: expected lean, default or off")
    if importlib.util.find_spec("mx_driving") is None:
        return {"skipped": "mx_driving is not installed here: no patcher to time (the patched trainer runs "
                           "without it)", "mode": mode}
    helper, median_step, times, lines = patcher_helper(), batch1_timer(state, device, count), {}, {}
    saved = set_environment({"DIT4DIT_MX_PATCHER": None, "DIT4DIT_DISABLE_MX_PATCHER": None})
    try:
        with contextlib.ExitStack() as stack:  # 1.0 patches are undone when it closes
            for setting, value in (("off", "off"), ("on", mode)):
                os.environ["DIT4DIT_MX_PATCHER"] = value
                lines[setting], problem = helper["_apply_mx_patcher"](stack)
                if problem:  # not importable or failed to apply: the trainer would run without it
                    return {"skipped": lines[setting], "mode": mode, "lines": lines,
                            "step_ms": {k: round(v * 1e3, 2) for k, v in times.items()}}
                times[setting] = median_step()
    finally:
        set_environment(saved)
    return {"mode": mode, "lines": lines, "step_ms": {k: round(v * 1e3, 2) for k, v in times.items()},
            "on_over_off": round(times["on"] / times["off"], 3), "steps_measured": count}


def latency(state: dict, device: torch.device, count: int) -> dict:
    """A request's stages at batch 1 through the serving Policy with its stage clock (no websocket): the median
    ms of `count` requests after a warm-up, plain and with real-time chunking (the warm-up's last rows as
    prev_actions, delay 2). The clock stays on the model, so this is the last section that uses it."""
    from bench_latency import synthetic_statistics

    from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection
    from DiT4DiT.config.typed import section
    from DiT4DiT.serving.policy import Policy, PolicyShape
    from DiT4DiT.serving.stage_timing import MODEL_STAGES

    model, cfg, views = state["model"].eval(), state["cfg"], state["views"]
    shape = PolicyShape.of(section(cfg.framework, FrameworkSection), section(cfg.datasets.vla_data,
                                                                             DatasetsVlaDataSection), 1)
    head = cfg.framework.action_model
    policy = Policy(model, shape, "device_check", synthetic_statistics(head.state_dim, head.action_dim), profile=True)
    lang = make_examples(cfg, batch=1, views=views)[0]["lang"]  # stored by the build section

    def ask(**fields) -> tuple[dict, float]:
        example = {"image": [np.zeros((shape.image_size, shape.image_size * views, 3), np.uint8)], "lang": lang,
                   "seed": 0, **fields}
        if shape.state_dim:
            example["state"] = np.zeros((1, shape.state_dim), np.float32)
        return _timed(device, lambda: policy.infer(policy.check({"examples": [example]})))[::-1]

    previous = ask()[0]["normalized_actions"][0]
    rows = {}
    for name, fields in (("plain", {}), ("rtc", {"prev_actions": previous[shape.chunk // 2:], "inference_delay": 2})):
        runs = [ask(**fields) for _ in range(count)]
        stages = np.median([answer["stage_ms"][0] for answer, _ in runs], axis=0)
        rows[name] = {**{stage: round(float(ms), 2) for stage, ms in zip(MODEL_STAGES, stages)},
                      "total": round(statistics.median(seconds for _, seconds in runs) * 1e3, 2)}
    return {"stages_ms": rows, "sampling_steps": policy.sampling_steps, "requests_measured": count,
            "rtc_over_plain": round(rows["rtc"]["total"] / rows["plain"]["total"], 3)}


def _timed(device: torch.device, run) -> tuple[float, object]:
    bench_model.synchronize(device)
    start = time.perf_counter()
    result = run()
    bench_model.synchronize(device)
    return time.perf_counter() - start, result


def rope(device: torch.device, shape: tuple[int, int, int, int]) -> dict:
    """Our processor's RoPE (the fused operator where torch_npu is loaded) against diffusers' apply_rotary_emb on
    the same device: max absolute error of the output and of the input's gradient, and both times."""
    from diffusers.models.embeddings import apply_rotary_emb

    from DiT4DiT.model.modules.cosmos_backbone import CosmosAttnProcessor, fused_rotary_mul

    fused = fused_rotary_mul() if device.type == "npu" else None
    ours = CosmosAttnProcessor(fused)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator).to(device, torch.bfloat16)
    angles = torch.randn(shape[2], shape[3] // 2, generator=generator).repeat(1, 2).to(device)
    cos_sin = (angles.cos(), angles.sin())
    upstream = torch.randn(shape, generator=generator).to(device, torch.bfloat16)

    def forward_backward(function) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = x.clone().requires_grad_(True)
        out = function(leaf)
        (out.float() * upstream.float()).sum().backward()
        return out.detach().float(), leaf.grad.float()

    def reference(leaf):
        return apply_rotary_emb(leaf, cos_sin, use_real=True, use_real_unbind_dim=-2)

    forward_backward(reference), forward_backward(lambda leaf: ours._rope(leaf, cos_sin))  # warm-up
    reference_s, (out_ref, grad_ref) = _timed(device, lambda: forward_backward(reference))
    ours_s, (out, grad) = _timed(device, lambda: forward_backward(lambda leaf: ours._rope(leaf, cos_sin)))
    kernel = ("torch.ops.npu.npu_rotary_mul" if fused is not None else
              "diffusers' apply_rotary_emb: our processor's own path off NPU (no fused kernel on this device)")
    return {"shape": list(shape), "dtype": "bfloat16 in, float32 inside (as diffusers)", "ours": kernel,
            "max_abs_error_forward": float((out - out_ref).abs().max()),
            "max_abs_error_grad": float((grad - grad_ref).abs().max()),
            "ours_ms": round(ours_s * 1e3, 3), "diffusers_ms": round(reference_s * 1e3, 3)}


def checksum(full_size: bool, limit: int) -> dict:
    """The same weights summed on the device CHECKSUM_REPEATS times, as the old end-of-run check did (per tensor,
    then over tensors): how many distinct totals, per dtype, with deterministic kernels off and on, each setting in a
    fresh process (Ascend takes only a thread's first use_deterministic_algorithms setting)."""
    sums, shape = {}, None
    for setting in ("off", "on"):
        result = fresh_process("checksum", setting, full_size, limit // 2)
        sums.update(result["sums"])
        shape = result["tensors"]
    return {"tensors": shape, "repeats": CHECKSUM_REPEATS, "sums": sums, "fresh_process": True}


def checksum_worker(device: torch.device, full_size: bool, setting: str) -> dict:
    generator = torch.Generator().manual_seed(0)
    count, side = (16, 2048) if full_size else (4, 64)
    weights = [torch.randn(side, side, generator=generator).to(device, torch.bfloat16) for _ in range(count)]
    results = {}
    for dtype in (torch.float32, torch.float64):
        name = f"{str(dtype).removeprefix('torch.')}, deterministic {setting}"
        try:
            totals = {float(torch.stack([w.to(dtype).sum() for w in weights]).sum()) for _ in range(CHECKSUM_REPEATS)}
        except RuntimeError as error:  # float64 is not on every device
            results[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
            continue
        results[name] = {"distinct": len(totals), "identical": len(totals) == 1}
    return {"tensors": f"{count} x ({side}, {side}) bfloat16", "sums": results}


FRESH_PROCESS_SECTIONS = ("deterministic", "checksum")


def fresh_process(section: str, setting: str, full_size: bool, limit: int, count: int = 1) -> dict:
    """Run `section`'s worker in a new interpreter with deterministic kernels `setting` (on/off) from its start:
    its JSON result, or RuntimeError with its last line; killed past `limit` seconds."""
    command = [sys.executable, str(Path(__file__).resolve()), "--fresh-process", section, "--setting", setting,
               "--steps", str(count), "--full-size" if full_size else "--tiny"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            out, err = process.communicate(timeout=limit)
        except BaseException:  # the time limit, or the section's own: no worker outlives it
            process.kill()
            process.communicate()
            raise
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or [f"exit {process.returncode}"])[-1]
        raise RuntimeError(f"{section} ({setting}) in a fresh process: {tail}")
    return json.loads(lines[-1])


def fresh_process_main(section: str, setting: str, full_size: bool, count: int) -> int:
    """The worker's side: the setting first (as the trainer makes it: trainer.deterministic's torch part), then the
    section's measurement, one JSON line on stdout."""
    from DiT4DiT.training.trainer import use_deterministic_kernels

    device = select_device("auto") if full_size else torch.device("cpu")
    if setting == "on":
        use_deterministic_kernels()
    else:
        torch.use_deterministic_algorithms(False)
    result = (deterministic_worker(device, full_size, count) if section == "deterministic"
              else checksum_worker(device, full_size, setting))
    print(json.dumps(result))
    return 0


def plan_environment() -> dict[str, str | None]:
    """What the launcher's plan exports on this host (scripts/train_8p.sh's environment): name -> value, None
    for a variable it unsets; the LD_LIBRARY_PATH prefix joined to the current value."""
    from DiT4DiT.launch import options, plan as planning, run

    built = planning.build(options.parse(["--num_processes=2", "--dry-run"], REPO.parent), planning.Facts())
    settings = [setting for setting in built.env.settings.values() if setting.exported]
    applied = run.apply(settings, dict(os.environ))
    return {setting.name: applied.get(setting.name) for setting in settings}


def set_environment(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set (None: unset) these variables in this process; returns what they were, for putting back."""
    before = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return before


def _zero2_worker(rank: int, world: int, port: int, device_type: str, out: str) -> None:
    import deepspeed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    select_device("auto")  # loads torch_npu in the child as in the parent
    getattr(torch, device_type).set_device(rank)
    deepspeed.init_distributed()
    results = {}
    for overlap in (True, False):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)])
        config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
                  "bf16": {"enabled": True},
                  # Small buckets: many reductions in flight, the case the overlap fixes are about.
                  "zero_optimization": {"stage": 2, "overlap_comm": overlap, "reduce_scatter": True,
                                        "contiguous_gradients": True, "reduce_bucket_size": 2**20,
                                        "allgather_bucket_size": 2**20}}
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                          config=config)
        generator = torch.Generator().manual_seed(100 + rank)
        losses, norms = [], []
        for _ in range(ZERO2_STEPS):
            x = torch.randn(4, 2048, generator=generator).to(engine.device, torch.bfloat16)
            loss = engine(x).float().square().mean()
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
            norms.append(float(engine.get_global_grad_norm()))
        results["on" if overlap else "off"] = {"losses": losses, "grad_norms": norms}
        del engine
    if rank == 0:
        Path(out).write_text(json.dumps(results))


def zero2(device: torch.device, count: int, tmp: Path) -> dict:
    """The ranks start in the environment the launcher's plan exports on this host (spawned interpreters read it
    when torch_npu and HCCL start); that environment is recorded in the result, also when skipped."""
    planned = plan_environment()
    if count < 2:
        return {"skipped": f"{count} device(s): the overlap_comm comparison needs 2", "environment": planned}
    out = tmp / "zero2.json"
    saved = set_environment(planned)
    try:
        workers = torch.multiprocessing.spawn(_zero2_worker, args=(2, 29517, device.type, str(out)), nprocs=2,
                                              join=False)
    finally:
        set_environment(saved)
    try:
        while not workers.join():
            pass
    finally:  # a time limit or a failed rank: no worker outlives the section
        for process in workers.processes:
            if process.is_alive():
                process.terminate()
    runs = json.loads(out.read_text())
    on, off = runs["on"], runs["off"]
    loss_diff = max(abs(a - b) for a, b in zip(on["losses"], off["losses"]))
    norm_diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(on["grad_norms"], off["grad_norms"]))
    return {**runs, "max_loss_diff": loss_diff, "max_grad_norm_rel_diff": norm_diff,
            "agree": loss_diff < 1e-3 and norm_diff < 1e-3, "steps": ZERO2_STEPS, "environment": planned}


def profile(state: dict, device: torch.device, tmp: Path) -> dict:
    """trainer.profile_steps' own profiler (DiT4DiT/training/profiler.py) over 3 batch-1 steps after one warm-up
    step, with the API the trainer gets on this device (the NPU patch hands it torch_npu.profiler): its top
    operators by self time (device time on an accelerator), as train.log shows them."""
    from dataclasses import asdict

    from DiT4DiT.training.profiler import step_profiler

    api = importlib.import_module("torch_npu.profiler" if device.type == "npu" else "torch.profiler")
    optimizer = torch.optim.AdamW([p for p in state["model"].parameters() if p.requires_grad], lr=1e-5)
    examples = make_examples(state["cfg"], batch=1, views=state["views"])
    train_step(state, examples, optimizer, device)
    with step_profiler(api, "1,3", 0, tmp / "profiled", 0, True, device.type) as profiler:
        for done in (1, 2, 3):
            train_step(state, examples, optimizer, device)
            profiler.step(done)
    return {"api": api.__name__, "steps": 3, "rows": [asdict(row) for row in profiler.rows or []]}


def _env_ab_worker(out: Path, size: str) -> None:
    """In a fresh process (the variables are read when torch_npu and CANN start): forward and backward through a
    few Cosmos blocks under bf16 autocast, ENV_AB_STEPS times after two warm-ups; the median step to `out`."""
    from DiT4DiT.tools.measure_activation_memory import cosmos_transformer, video_inputs

    device = select_device("auto") if size == "full" else torch.device("cpu")
    heads, blocks, frames, high, wide, text = ENV_AB_SHAPE[size]
    transformer = cosmos_transformer(heads, blocks, text_projection=False).to(device)
    inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in video_inputs(transformer, 1, (frames, high, wide),
                                                                                    text).items()}

    def one() -> float:
        def run():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type != "cpu"):
                out_ = transformer(**inputs)
            (out_[0] if isinstance(out_, tuple) else out_.sample).float().square().mean().backward()
        return _timed(device, run)[0]

    one(), one()
    out.write_text(json.dumps({"step_ms": round(statistics.median(one() for _ in range(ENV_AB_STEPS)) * 1e3, 3),
                               "device": str(device)}))


def env_ab(full_size: bool, tmp: Path) -> dict:
    """Each MindSpeed-MM A3 variable the launcher sets on NPU hosts, unset in turn against all of them set, each
    setting in its own process: median step of the blocks, and unset / set (above 1: the variable helps)."""
    import subprocess

    from DiT4DiT.launch.environment import MINDSPEED_A3

    size = "full" if full_size else "tiny"

    def timed(unset: str | None) -> float:
        env = {**os.environ, **MINDSPEED_A3}
        if unset:
            env.pop(unset)
        out = tmp / f"env_ab_{unset or 'all'}.json"
        subprocess.run([sys.executable, __file__, "--env-ab-worker", str(out), size], env=env, check=True,
                       capture_output=True, text=True, timeout=120)
        return json.loads(out.read_text())["step_ms"]

    all_set = timed(None)
    rows = {name: {"value": value, "unset_ms": (unset_ms := timed(name)), "all_set_ms": all_set,
                   "unset_over_set": round(unset_ms / all_set, 3)} for name, value in MINDSPEED_A3.items()}
    return {"workload": dict(zip(("heads", "blocks", "latent_frames", "patches_high", "patches_wide", "text_tokens"),
                                 ENV_AB_SHAPE[size])), "steps": ENV_AB_STEPS, "rows": rows}


def profile_line(prof: dict) -> str:
    top = ", ".join(f"{row['name']} {row['share']:.0%}" for row in prof["rows"][:5])
    return f"profiler ({prof['api']}), 3 steps, top operators by self time: {top}"


def env_ab_line(ab: dict) -> str:
    return "MindSpeed-MM A3 variables, step unset / all set: " + ", ".join(
        f"{name}={row['value']} {row['unset_over_set']}x" for name, row in ab["rows"].items())


def deterministic_line(det: dict) -> str:
    return f"deterministic kernels: step {det['step_ms']['on']} ms on, {det['step_ms']['off']} ms off ({det['on_over_off']}x)"


def patcher_line(pat: dict) -> str:
    if pat.get("skipped"):
        return f"mx_driving patcher on/off: skipped: {pat['skipped']}"
    return (f"mx_driving patcher ({pat['mode']}) on / off: step {pat['step_ms']['on']} ms / {pat['step_ms']['off']} "
            f"ms ({pat['on_over_off']}x); on: {pat['lines']['on']}")


def rope_line(rot: dict) -> str:
    return (f"RoPE {tuple(rot['shape'])}, {rot['ours'].split(':')[0]} vs diffusers: max error forward "
            f"{rot['max_abs_error_forward']:.3g}, grad {rot['max_abs_error_grad']:.3g}; {rot['ours_ms']} ms vs "
            f"{rot['diffusers_ms']} ms")


def checksum_line(sums: dict) -> str:
    return f"same weights summed {sums['repeats']} times: " + "; ".join(
        f"{name}: {'identical' if r.get('identical') else r.get('error') or str(r['distinct']) + ' distinct'}"
        for name, r in sums["sums"].items())


def latency_line(lat: dict) -> str:
    plain, rtc = lat["stages_ms"]["plain"], lat["stages_ms"]["rtc"]
    return (f"request at batch 1 ({lat['sampling_steps']} sampling steps), ms: " + ", ".join(
        f"{stage.replace('_', ' ')} {ms}" for stage, ms in plain.items()) + f"; with real-time chunking: action "
        f"sampling {rtc['action_sampling']}, total {rtc['total']} ({lat['rtc_over_plain']}x)")


SUMMARY_LINES = {"deterministic": deterministic_line, "patcher": patcher_line, "latency": latency_line,
                 "rope": rope_line, "checksum": checksum_line, "profile": profile_line, "env_ab": env_ab_line}


def print_table(data: dict) -> None:
    sections = data["sections"]
    env = sections.get("environment", {})
    print(f"\ndevice check: {env.get('name', '?')} ({env.get('device', '?')}), peak bf16 "
          f"{env.get('peak_bf16_tflops') or 'unknown'} TFLOPS, {data['size']}")
    rows = sections.get("steps", {})
    if rows.get("status") == "ok" or any(isinstance(v, dict) for v in rows.values()):
        print(f"  {'batch':>5} {'step ms':>10} {'TFLOPS':>8} {'MFU':>7} {'peak MiB':>9}")
        for batch in BATCHES:
            row = rows.get(batch) or rows.get(str(batch))
            if row:
                mfu = f"{row['mfu'] * 100:.1f}%" if row["mfu"] is not None else "-"
                tflops = f"{row['tflops']:.4g}" if row["tflops"] is not None else "-"
                print(f"  {batch:>5} {row['step_ms']:>10.1f} {tflops:>8} {mfu:>7} {row['peak_mib']:>9}")
    flop = sections.get("flops", {})
    if flop.get("status") == "ok":
        analytic = flop["step_analytic_per_sample"]
        print(f"  FLOPs per sample and step: {analytic['total']:.3e} analytic (MFU's), "
              f"{flop['step_counted_per_sample']:.3e} counted by FlopCounterMode ({flop['step_counted_over_analytic']}x); "
              + ", ".join(f"{part} {value:.2e}" for part, value in analytic.items() if part != "total"))
        print(f"  one transformer forward: counted / analytic {flop['counted_over_analytic_linear']} (matmuls), "
              f"{flop['counted_over_analytic_total']} (with attention)")
    st = sections.get("store", {})
    if st.get("status") == "ok":
        print(f"  store off / on: {st['store_off_over_on']}x; full feature pass / early exit: "
              f"{st['full_feature_pass_over_early_exit']}x; medians (ms) {st['median_ms']}")
    pl = sections.get("plan", {})
    if pl.get("status") == "ok":
        print("  memory estimate vs measured peak (MiB): " + ", ".join(
            f"batch {b}: {row['estimate_mib']} vs {row['measured_peak_mib']}" for b, row in pl.items()
            if isinstance(row, dict)))
        for line in pl.get("plan_for_config", []):
            print(f"  plan: {line}")
    ck = sections.get("checkpointing", {})
    if ck.get("status") == "ok":
        print(f"  checkpointing at batch 4: step {ck['off']['step_ms']} -> {ck['on']['step_ms']} ms "
              f"({ck['time_on_over_off']}x), peak {ck['off']['peak_mib']} -> {ck['on']['peak_mib']} MiB "
              f"({ck['peak_on_over_off']}x)")
    rep = sections.get("repeat", {})
    if rep.get("status") == "ok":
        print(f"  repeat_interleave on {rep['elements']} elements: {rep['with_repeat_ms']} ms with, "
              f"{rep['without_ms']} ms without, same gradient {rep['same_gradient']}")
    for name, line in SUMMARY_LINES.items():
        if sections.get(name, {}).get("status") == "ok":
            print(f"  {line(sections[name])}")
    z2 = sections.get("zero2", {})
    if z2.get("status") == "ok":
        print(f"  ZeRO-2 overlap_comm on/off: {z2.get('skipped') or 'agree ' + str(z2['agree'])}")
    for name, result in sections.items():
        if result.get("status") != "ok":
            print(f"  {name}: {result['status']} {result.get('error') or result.get('reason') or ''}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--env-ab-worker"]:  # env_ab's own processes
        _env_ab_worker(Path(argv[1]), argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--full-size", action="store_true", help="the random-weight full-size model, on a device")
    size.add_argument("--tiny", action="store_true", help="the tiny model (CPU, under a minute)")
    parser.add_argument("--out", type=Path, default=Path("device_check.json"), help="the JSON report")
    parser.add_argument("--peak-tflops", type=float, help="bf16 dense peak for MFU, when the table lacks the device")
    parser.add_argument("--fresh-process", choices=FRESH_PROCESS_SECTIONS, help=argparse.SUPPRESS)  # a section's worker
    parser.add_argument("--setting", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if args.fresh_process:
        if args.tiny:
            torch.set_num_threads(1)
        return fresh_process_main(args.fresh_process, args.setting, args.full_size, args.steps)
    device = select_device("auto") if args.full_size else torch.device("cpu")
    if args.full_size and device.type == "cpu":
        print("device_check: --full-size needs a CUDA GPU or an NPU and found neither; use --tiny on a CPU host",
              file=sys.stderr)
        return 2
    if args.tiny:
        torch.set_num_threads(1)
    # cuBLAS reads its workspace setting once, at first use; deterministic kernels need this one (the value the
    # launcher exports with trainer.deterministic), so the whole check runs with it on CUDA.
    os.environ.setdefault(*next(iter(DETERMINISTIC_ENV["cuda"].items())))
    report = Report(args.out, time.monotonic() + (TOTAL_BUDGET_S if args.full_size else TINY_LIMIT_S))
    report.data["size"] = "full-size (random weights)" if args.full_size else "tiny"
    limits = SECTION_LIMIT_S if args.full_size else {name: TINY_LIMIT_S for name in SECTION_LIMIT_S}
    state: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = report.run("environment", limits["environment"], environment, device)
        peak = args.peak_tflops or env.get("peak_bf16_tflops")
        if report.run("build", limits["build"], build, state, args.full_size, device, Path(tmp))["status"] == "ok":
            report.run("flops", limits["flops"], flops, state, device)
            report.run("store", limits["store"], store, state, device, 4 if args.full_size else 2)
            report.run("steps", limits["steps"], steps, state, device, peak, 5 if args.full_size else 2)
            report.run("plan", limits["plan"], plan, state, device, Path(tmp), args.full_size)
            report.run("checkpointing", limits["checkpointing"], checkpointing, state, device,
                       3 if args.full_size else 2)
            report.run("patcher", limits["patcher"], patcher, state, device, 3 if args.full_size else 2)
            report.run("latency", limits["latency"], latency, state, device, 3 if args.full_size else 2)
            report.run("profile", limits["profile"], profile, state, device, Path(tmp))
        state.clear()  # the model's memory back before the sections that need none of it (or their own process)
        gc.collect()
        if device.type != "cpu":
            getattr(torch, device.type).empty_cache()
        report.run("deterministic", limits["deterministic"], deterministic, args.full_size, 5 if args.full_size else 2,
                   limits["deterministic"])
        report.run("repeat", limits["repeat"], repeat, device)
        report.run("rope", limits["rope"], rope, device, ROPE_SHAPE["full" if args.full_size else "tiny"])
        report.run("checksum", limits["checksum"], checksum, args.full_size, limits["checksum"])
        report.run("zero2", limits["zero2"], zero2, device, env.get("device_count", 1), Path(tmp))
        report.run("env_ab", limits["env_ab"], env_ab, args.full_size, Path(tmp))
    print_table(report.data)
    print(f"\nwrote {args.out}")
    failed = [name for name, result in report.data["sections"].items() if result["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
