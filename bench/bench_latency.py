"""Where a served request's time goes, stage by stage, at three model sizes; the sampler's step count and real-time
chunking, measured in the same run.

    .venv/bin/python bench/bench_latency.py [--sizes tiny,large] [--steps 1,2,4,8] [--requests 5] [--json FILE]
    .venv/bin/python bench/bench_latency.py --sizes tiny --ckpt RUN/checkpoints/steps_N_pytorch_model.pt
    flock /work/heavy.lock .venv/bin/python bench/bench_latency.py --sizes full --snapshot SNAPSHOT --steps 2,4,8 \\
        --requests 1

Each size's model is served by a profiling server (`--profile`: the device synchronised between stages) on a
thread of this process, and a client of this process sends batch-1 requests of the run's camera views (combined by
the server, as training combined them), an instruction and a state, each with its own seed: the `timing` of every reply gives decode, check, queue wait, preprocess,
prompt, VAE encode, feature pass, action sampling and unnormalise, in ms (stage_timing.py). Per size, for each
--steps value (the server's --sampling_steps) the medians of --requests requests after one warm-up, then the same
at the run's own step count with real-time chunking (the previous reply's last rows as prev_actions, delay 2):
its guidance takes one backward through the head per Euler step; and with an instruction the prompt store does not
hold (the text encoder runs; a served run's store holds its training instructions, which are looked up). The
settings take turns request by request, so a change of machine load reaches all of them alike. The effect of the step count on the actions is
the mean absolute difference of the normalised actions (same example, same seed) from those at the most steps.

Sizes: `tiny` is the tiny config (32-pixel views; random weights, or a trained run with --ckpt), `large` is
bench_model.py's --deep transformer (12 blocks, 1024 wide, 64-pixel views) with the tiny text encoder and VAE,
`full` is the full-size snapshot at --snapshot (the RoboTwin config: 224-pixel views, bf16, 2B transformer, its
text encoder and Wan VAE; random weights where the snapshot has them). Timings are for this machine as loaded at
the time: compare rows of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # runnable without an installed package

import bench_model  # noqa: E402
from tiny_runs import TINY_CONFIG  # noqa: E402

from DiT4DiT.config.schema import load_config  # noqa: E402
from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection  # noqa: E402
from DiT4DiT.config.typed import section  # noqa: E402
from DiT4DiT.dataloader.statistics import statistics_section  # noqa: E402
from DiT4DiT.model.framework import build_framework  # noqa: E402
from DiT4DiT.model.modules.node_store import Ranks  # noqa: E402
from DiT4DiT.serving.client import PolicyClient  # noqa: E402
from DiT4DiT.serving.device import select_device  # noqa: E402
from DiT4DiT.serving.policy import Policy, PolicyShape  # noqa: E402
from DiT4DiT.serving.server import running_server  # noqa: E402
from DiT4DiT.serving.stage_timing import STAGES  # noqa: E402
from DiT4DiT.tools.tiny_cosmos import DEFAULT_OUT, write_tiny_pipeline  # noqa: E402

ROBOTWIN = REPO / "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"
DEEP_BLOCKS = 12
INSTRUCTION = "pick up the red block and place it in the bowl"
RTC_DELAY = 2  # the delay an rtc request asks for; its cost does not depend on it


def synthetic_statistics(state_dim: int, action_dim: int) -> dict:
    """min_max statistics in [-1, 1] (the unnormalise stage's work does not depend on the values)."""
    def part(width: int, mask: bool) -> dict:
        stats = {name: np.full(width, value) for name, value in
                 (("min", -1.0), ("max", 1.0), ("q01", -1.0), ("q99", 1.0), ("mean", 0.0), ("std", 1.0))}
        return statistics_section(stats, ["min_max"] * width, [True] * width if mask else None, [width])
    return {"action": part(action_dim, True), "state": part(state_dim, False)}


@contextlib.contextmanager
def built_policy(size: str, args, device: torch.device, tmp: Path):
    """A profiling Policy of `size`, its model on `device`."""
    store = [f"framework.cosmos25.prompt_store_dir={tmp / 'prompt_store'}"]
    with contextlib.ExitStack() as stack:
        if size == "tiny" and args.ckpt:
            yield Policy.load(args.ckpt, device, max_batch=1, profile=True)
            return
        if size == "large":
            width = bench_model.DEEP_HEADS * bench_model.DEEP_HEAD_DIM
            stack.enter_context(bench_model.substituted_backbone(bench_model.deep_components(DEEP_BLOCKS)))
            cfg = load_config(TINY_CONFIG, store + [
                "framework.cosmos25.base_model=random-deep", f"framework.cosmos25.extract_layer={round(0.6 * DEEP_BLOCKS)}",
                f"framework.cosmos25.vl_hidden_dim={width}", "datasets.vla_data.image_size=64",
                f"framework.action_model.diffusion_model_cfg.cross_attention_dim={width}"])
        elif size == "full":
            cfg = load_config(ROBOTWIN, store + [f"framework.cosmos25.base_model={args.snapshot}"])
        else:
            pipeline = DEFAULT_OUT if (DEFAULT_OUT / "model_index.json").is_file() else write_tiny_pipeline(tmp / "tiny")
            cfg = load_config(TINY_CONFIG, store + [f"framework.cosmos25.base_model={pipeline}"])
        torch.manual_seed(0)
        model = build_framework(cfg)
        model.requires_grad_(False)
        model = model.to(device).eval()
        head = cfg.framework.action_model
        shape = PolicyShape.of(section(cfg.framework, FrameworkSection), section(cfg.datasets.vla_data,
                                                                                 DatasetsVlaDataSection), 1)
        yield Policy(model, shape, "bench", synthetic_statistics(head.state_dim, head.action_dim), profile=True)


def request(policy: Policy, seed: int, unseen: bool = False, **fields) -> dict:
    """One example: the run's camera views at the model's size (side by side), the instruction (`unseen`: one of
    its own, which the prompt store does not hold), a state, its seed."""
    rng = np.random.default_rng(seed)
    size, views = policy.shape.image_size, policy.shape.max_views
    lang = f"{INSTRUCTION}, take {seed}" if unseen else INSTRUCTION
    views = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(views)]
    example = {"views": views, "lang": lang, "seed": seed, **fields}
    if policy.shape.state_dim:
        example["state"] = rng.uniform(-1, 1, (1, policy.shape.state_dim)).astype(np.float32)
    return example


def measure(client: PolicyClient, policy: Policy, settings: list[tuple[str, int, dict]], count: int
            ) -> tuple[dict, dict]:
    """Per setting (name, sampling steps, request() keywords): the median ms per stage (and total) of `count`
    requests, the settings taking turns so that all see the same machine load; and its first normalised actions."""
    head = policy.model.action_model
    own_steps, timings, first = head.num_inference_timesteps, {name: [] for name, _, _ in settings}, {}
    for index in range(count):
        for name, steps, fields in settings:
            head.num_inference_timesteps = steps  # the server's model thread is idle between requests
            reply = client.predict_action({"examples": [request(policy, index, **fields)]})
            if not reply.get("ok"):
                raise RuntimeError(reply.get("error"))
            timings[name].append(reply["timing"])
            first.setdefault(name, reply["data"]["normalized_actions"][0])
    head.num_inference_timesteps = own_steps
    names = [f"{stage}_ms" for stage in STAGES] + ["total_ms"]
    return ({setting: {name: round(statistics.median(t[name] for t in runs), 2) for name in names}
             for setting, runs in timings.items()}, first)


def run_size(size: str, args, device: torch.device) -> dict:
    with tempfile.TemporaryDirectory() as tmp, built_policy(size, args, device, Path(tmp)) as policy:
        own_steps = policy.sampling_steps
        # As a served run's store holds its training instructions: the instruction is looked up, not encoded.
        policy.model.backbone_interface.extractor.prepare_prompts([INSTRUCTION], Ranks(), release_encoder=False)
        with running_server(policy) as server, PolicyClient("127.0.0.1", server.port) as client:
            # The warm-up (allocations, first kernels) gives the previous chunk an rtc request continues.
            previous = client.infer([request(policy, 999)])["normalized_actions"][0]
            leftover = np.ascontiguousarray(previous[policy.shape.chunk // 2:])
            settings = [(f"steps={steps}", steps, {}) for steps in sorted({*args.steps, own_steps})]
            settings.append((f"steps={own_steps} rtc", own_steps,
                             {"prev_actions": leftover, "inference_delay": RTC_DELAY}))
            settings.append((f"steps={own_steps} new lang", own_steps, {"unseen": True}))
            rows, first = measure(client, policy, settings, args.requests)
        actions = {steps: first[f"steps={steps}"] for _, steps, fields in settings if not fields}
        unseen = rows.pop(f"steps={own_steps} new lang")
        most = max(actions)
        effect = {steps: round(float(np.abs(actions[steps] - actions[most]).mean()), 4) for steps in actions}
        plain, guided = rows[f"steps={own_steps}"], rows[f"steps={own_steps} rtc"]
        return {"size": size, "image": f"{policy.shape.max_views} view(s) of {policy.shape.image_size} px",
                "device": str(device),
                "trained": bool(size == "tiny" and args.ckpt), "requests": args.requests, "stages_ms": rows,
                "prompt_ms_unseen_instruction": unseen["prompt_ms"],
                "action_change_vs_most_steps": {"reference_steps": most, **{str(k): v for k, v in effect.items()}},
                "rtc_cost": {"steps": own_steps,
                             "action_sampling_ratio": round(guided["action_sampling_ms"] / plain["action_sampling_ms"], 2),
                             "total_ratio": round(guided["total_ms"] / plain["total_ms"], 3),
                             "extra_ms": round(guided["total_ms"] - plain["total_ms"], 2)}}


def print_table(results: list[dict]) -> None:
    columns = [f"{stage}_ms" for stage in STAGES] + ["total_ms"]
    heads = [c[:-3].replace("_", " ") for c in columns]
    print(f"{'size':6} {'setting':14} " + " ".join(f"{h:>12}" for h in heads))  # prompt: from the store
    for result in results:
        for setting, row in result["stages_ms"].items():
            print(f"{result['size']:6} {setting:14} " + " ".join(f"{row[c]:12.2f}" for c in columns))
    for result in results:
        cost, change = result["rtc_cost"], result["action_change_vs_most_steps"]
        print(f"{result['size']}: real-time chunking at {cost['steps']} steps: action sampling x"
              f"{cost['action_sampling_ratio']}, request x{cost['total_ratio']} (+{cost['extra_ms']} ms); prompt of an "
              f"instruction not in the store {result['prompt_ms_unseen_instruction']} ms; mean |change| "
              f"of the normalised actions against {change['reference_steps']} steps: "
              + ", ".join(f"{k} steps {v}" for k, v in change.items() if k != "reference_steps"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,large", help="comma list of tiny, large, full")
    parser.add_argument("--steps", default="1,2,4,8", type=lambda text: [int(v) for v in text.split(",")],
                        help="the sampler's step counts to measure")
    parser.add_argument("--requests", type=int, default=5, help="measured requests per setting (after a warm-up)")
    parser.add_argument("--ckpt", type=Path, help="a trained run's checkpoint for the tiny size")
    parser.add_argument("--snapshot", type=Path, default=Path("/work/assets/Cosmos-Predict2.5-2B-random"),
                        help="the full-size Cosmos snapshot for the full size")
    parser.add_argument("--device", default="cpu", help="auto, cpu, cuda or npu")
    parser.add_argument("--threads", type=int, default=max(1, len(os.sched_getaffinity(0)) // 2),
                        help="torch intra-op threads on the CPU")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = select_device(args.device)
    load = os.getloadavg()[0]
    results = []
    for size in args.sizes.split(","):
        started = time.monotonic()
        results.append(run_size(size, args, device))
        results[-1]["wall_s"] = round(time.monotonic() - started, 1)
        print(f"[{size}] done in {results[-1]['wall_s']} s", flush=True)
    print(f"\nload average {load:.1f} before, {os.getloadavg()[0]:.1f} after; {args.threads} thread(s), {device}")
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(["python bench/bench_latency.py", *sys.argv[1:]]),
                                         "threads": args.threads, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
