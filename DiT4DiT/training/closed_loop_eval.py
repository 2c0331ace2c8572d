"""Success rate during training: every `trainer.closed_loop_eval.interval` steps a side process serves the
checkpoint just saved and runs Meta-World episodes against it, while training goes on.

The trainer (main process) starts at most one evaluation at a time, collects each when it ends (metrics.jsonl,
wandb, the loss plot's second panel, tagged with the step of its checkpoint), and at the run's end waits for the
last one or cancels it, with a line either way. Nothing here can hold the trainer: an evaluation that runs past
`timeout_s` (stopped, hung) is ended with a line and the next due step starts a new one; one that died is named
and whatever it started is ended; a summary.json that cannot be read is a line, never an error; every wait is
bounded. The side process and everything it starts die with the trainer (process_lifetime), and its server also
watches the trainer (`--owner_pid`). The side process is this module's `main()`:

    python -m DiT4DiT.training.closed_loop_eval --ckpt RUN/checkpoints/steps_N_pytorch_model.pt --step N \
        --out RUN/closed_loop/steps_N --task handle-press-v3 --episodes 10 [...] [-- EVALUATE_OPTIONS]

It starts `DiT4DiT.serving.server` on the checkpoint (on a free loopback port, the configured device), runs
`DiT4DiT.evaluation.metaworld evaluate` in the simulator's Python against it, and stops the server; OUT gets the
evaluation's files (summary.json first) and server.log / evaluate.log. Nothing here imports torch: the side
process's own cost is the server's and the simulator's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from DiT4DiT.host import npu_topology, process_lifetime
from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.sections import TrainerClosedLoopEvalSection, TrainerSection
from DiT4DiT.errors import DiT4DiTError, run_main
from DiT4DiT.memory.plan import nvidia_free_mib

log = logging.getLogger("dit4dit.closed_loop")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = ROOT / ".venv-metaworld" / "bin" / "python"
OUT_FOLDER = "closed_loop"  # RUN/closed_loop/steps_N/
SERVER_READY = re.compile(r"serving DiT4DiT on ws://127\.0\.0\.1:(\d+)")
SERVER_START_S = 600  # loading a checkpoint on a loaded CPU host can take minutes
NICENESS = 10
METRIC_PREFIX = "closed_loop_"  # of the keys in metrics.jsonl; wandb shows them as closed_loop/<name>
STOP_GRACE_S = 30.0  # how long a cancelled side process (its server, its simulators) gets before SIGKILL


class ClosedLoopEvalError(DiT4DiTError):
    """The side process could not evaluate (a server that does not start, a simulator error)."""


def simulator_python(settings: TrainerClosedLoopEvalSection) -> Path:
    return Path(settings.python) if settings.python else DEFAULT_PYTHON


def check_config(trainer: TrainerSection) -> None:
    """ConfigError for trainer.closed_loop_eval settings that cannot work, before anything is written."""
    settings = trainer.closed_loop_eval
    if not settings.interval:
        return
    if settings.interval % trainer.save_interval:
        raise ConfigError(f"trainer.closed_loop_eval.interval={settings.interval} is not a multiple of "
                          f"trainer.save_interval={trainer.save_interval}: it evaluates the checkpoint saved at its "
                          "step; make it a multiple")
    side_process_devices(settings, local_processes())  # ConfigError when its server would land on a training die
    python = simulator_python(settings)
    if not python.is_file():
        raise ConfigError(f"trainer.closed_loop_eval.python: '{python}' does not exist; build the simulator's "
                          "environment with `make sim-env`, or point the key at its Python")
    from DiT4DiT.evaluation.errors import BadArgument
    from DiT4DiT.evaluation.metaworld import add_scene_options, scene_setup

    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_scene_options(parser)
    try:
        options, unknown = parser.parse_known_args(shlex.split(settings.evaluate_options or ""))
        if unknown:
            raise ValueError(f"{' '.join(unknown)} is not a scene option ({', '.join(scene_option_names(parser))})")
        scene_setup(options)
    except (argparse.ArgumentError, BadArgument, ValueError) as error:
        raise ConfigError(f"trainer.closed_loop_eval.evaluate_options={settings.evaluate_options!r}: {error}; give "
                          "the scene options the demos were collected with, e.g. '--image_size 32'") from None


def scene_option_names(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions for name in action.option_strings]


# -- where the side process runs: a device no training process uses, and every core ----------------------------

VISIBLE_DEVICES = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
DEVICE_NAMES = {"npu": "NPU die", "cuda": "GPU"}


def local_processes() -> int:
    """Training processes on this node (torchrun / accelerate launch set LOCAL_WORLD_SIZE; 1 without them)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def host_devices(kind: str) -> tuple[int, list[int]] | None:
    """(devices of `kind` on this host, the ones training sees in the order ranks take them), or None without any:
    npu-smi's dies after ASCEND_RT_VISIBLE_DEVICES, nvidia-smi's GPUs after CUDA_VISIBLE_DEVICES."""
    if kind == "npu":
        topo = npu_topology.read_topology()
        if topo is None:
            return None
        count = len(topo.chips)
        return count, npu_topology.visible_ids(count, os.environ.get(VISIBLE_DEVICES["npu"]))
    count = len(nvidia_free_mib())
    if not count:
        return None
    listed = os.environ.get(VISIBLE_DEVICES["cuda"])
    if listed is None:
        return count, list(range(count))
    ids = []
    for token in listed.split(","):  # CUDA stops at the first id it cannot use
        if not token.strip().isdigit() or int(token) >= count:
            break
        ids.append(int(token))
    return count, ids


def side_process_devices(settings: TrainerClosedLoopEvalSection, processes: int) -> dict[str, str]:
    """The environment that gives the evaluation's server one device no training process on this node uses
    (ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES: it then sees only that one, as device 0): device_id when
    named, else the first visible device past the `processes` training takes. {} for device cpu or a host without
    such a device (the server runs on the CPU). ConfigError, one line, when the named device trains or does not
    exist, or when training takes every visible device and none is named: rank 0's device already holds its
    training state, so sharing it runs one of the two out of memory, or makes every rank wait for it."""
    if settings.device == "cpu":
        return {}
    kinds = ("npu", "cuda") if settings.device == "auto" else (settings.device,)
    found = next(((kind, devices) for kind in kinds if (devices := host_devices(kind)) is not None), None)
    if found is None:
        return {}
    kind, (count, visible) = found
    training, name, variable = visible[:processes], DEVICE_NAMES[kind], VISIBLE_DEVICES[kind]
    key = f"trainer.closed_loop_eval.device={settings.device}"
    if settings.device_id is not None:
        if settings.device_id >= count:
            raise ConfigError(f"trainer.closed_loop_eval.device_id={settings.device_id}: this host has {count} "
                              f"{name}s (0-{count - 1}); name one that no training process uses")
        if settings.device_id in training:
            raise ConfigError(f"trainer.closed_loop_eval.device_id={settings.device_id}: training process "
                              f"{training.index(settings.device_id)} of this node uses that {name}; name one it does "
                              f"not (hide it from training with {variable}), or set trainer.closed_loop_eval.device=cpu")
        return {variable: str(settings.device_id)}
    free = visible[processes:]
    if not free:
        raise ConfigError(f"{key}: the {processes} training processes on this node use all {len(visible)} visible "
                          f"{name}s, so the evaluation's policy server would share {name} {training[0]} with rank 0; "
                          f"set trainer.closed_loop_eval.device_id to a free {name} (hidden from training with "
                          f"{variable}), or trainer.closed_loop_eval.device=cpu")
    return {variable: str(free[0])}


def use_every_core() -> str:
    """The side process's CPU affinity set to the whole machine, for it and what it starts (an NPU trainer's rank 0
    may be bound to its share of the cores, CPU_AFFINITY_CONF, and a child inherits the binding); a line saying so."""
    before = len(os.sched_getaffinity(0))
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    return f"CPU affinity: {len(os.sched_getaffinity(0))} cores (was {before})"


def due(step: int, interval: int, last: int) -> bool:
    return step % interval == 0 or step == last


class ClosedLoopEvaluator:
    """The trainer's side: one side process at a time, its result logged when it ends (main process only)."""

    def __init__(self, settings: TrainerClosedLoopEvalSection, run_dir: Path, last_step: int, record,
                 wait_limit_s: float, devices: dict[str, str] | None = None):
        """`record(dict)` writes a result tagged with its step (MetricsLogger.log_evaluation); at the end the main
        process waits at most `wait_limit_s`, as the other ranks wait for it at the closing barrier; `devices`: the
        side process's device variables (side_process_devices)."""
        self.settings, self.run_dir, self.last_step, self.record = settings, run_dir, last_step, record
        self.wait_limit_s, self.devices = wait_limit_s, devices or {}
        self.running: tuple[int, subprocess.Popen, Path, float] | None = None  # step, process, out, start time

    def step(self, done: int) -> None:
        """After step `done` (and its save): log a finished evaluation; start one on this step's checkpoint when
        it is due."""
        self.collect()
        if not due(done, self.settings.interval, self.last_step):
            return
        if self.running is not None:
            log.warning("closed-loop evaluation of step %d still running: step %d's checkpoint is not evaluated "
                        "(raise trainer.closed_loop_eval.interval, or lower episodes)", self.running[0], done)
            return
        self.start(done)

    def start(self, step: int) -> None:
        s = self.settings
        ckpt = self.run_dir / "checkpoints" / f"steps_{step}_pytorch_model.pt"
        out = self.run_dir / OUT_FOLDER / f"steps_{step}"
        out.mkdir(parents=True, exist_ok=True)
        # At nice 10 (inherited by its server and simulators): on a busy host the trainer keeps its CPU share.
        command = ["nice", "-n", str(NICENESS), sys.executable, "-m", "DiT4DiT.training.closed_loop_eval",
                   "--ckpt", str(ckpt), "--step", str(step), "--out", str(out), "--task", s.task, "--episodes",
                   str(s.episodes), "--max_steps", str(s.max_steps), "--seed", str(s.seed), "--num_envs",
                   str(s.num_envs), "--device", s.device, "--python", str(simulator_python(s)),
                   "--owner_pid", str(os.getpid()), "--", *shlex.split(s.evaluate_options or "")]
        env = dict(os.environ, OMP_NUM_THREADS=str(s.threads), PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **self.devices)
        with (out / "side_process.log").open("w") as output:
            # A session of its own: cancelling stops the server and the simulators with it.
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.running = step, process, out, time.monotonic()
        log.info("closed-loop evaluation of step %d started (pid %d, %d episodes of %s) -> %s", step, process.pid,
                 s.episodes, s.task, out)

    def collect(self) -> None:
        """Log the evaluation running, if it has ended; end it if it ran past timeout_s."""
        if self.running is None:
            return
        step, process, out, started = self.running
        if not process_lifetime.exited(process):
            ran = time.monotonic() - started
            if ran > self.settings.timeout_s:
                state = process_lifetime.process_state(process.pid)
                self.running = None
                process_lifetime.end_group(process, STOP_GRACE_S)
                log.warning("closed-loop evaluation of step %d ended after %.0f s, past trainer.closed_loop_eval."
                            "timeout_s=%g (side process pid %d %s): no result for that step; see %s", step, ran,
                            self.settings.timeout_s, process.pid, state, out / "side_process.log")
            return
        self.running = None
        process_lifetime.end_group(process, STOP_GRACE_S)  # what a side process that died left: server, simulators
        summary = out / "summary.json"
        if process.returncode != 0 or not summary.is_file():
            lines = (out / "side_process.log").read_text(errors="replace").strip().splitlines()
            reason = next((line for line in reversed(lines) if line.startswith("error:")), (lines or ["no output"])[-1])
            log.warning("closed-loop evaluation of step %d failed (%s): %s; see %s", step,
                        process_lifetime.how_it_ended(process.returncode), reason, out / "side_process.log")
            return
        try:
            result = read_summary(summary)
        except ClosedLoopEvalError as error:
            log.warning("closed-loop evaluation of step %d: %s; no result recorded for that step", step, error)
            return
        low, high = result["ci95"]
        self.record({"step": step, f"{METRIC_PREFIX}success_rate": result["success_rate"],
                     f"{METRIC_PREFIX}ci95_low": low, f"{METRIC_PREFIX}ci95_high": high,
                     f"{METRIC_PREFIX}episodes": result["episodes"],
                     f"{METRIC_PREFIX}wall_s": round(time.monotonic() - started, 1)})
        log.info("closed loop at step %d: %s %d/%d = %.0f%% (95%% interval %.0f-%.0f%%)", step, result["task"],
                 result["successes"], result["episodes"], 100 * result["success_rate"], 100 * low, 100 * high)

    def close(self, exc_type=None, exc=None, traceback=None) -> None:
        """At the run's end (an ExitStack exit callback): wait for the last evaluation (at_end=wait, a run that
        ended normally) or cancel it; a line says which."""
        if self.running is None:
            return
        step, process = self.running[0], self.running[1]
        reason = "the run stopped early" if exc_type is not None else "trainer.closed_loop_eval.at_end=cancel"
        if exc_type is None and self.settings.at_end == "wait" and process.poll() is None:
            log.info("training done; waiting for the closed-loop evaluation of step %d (trainer.closed_loop_eval."
                     "at_end=wait)", step)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self.wait_limit_s)
            reason = f"not done within {self.wait_limit_s:.0f} s, 80% of trainer.collective_timeout_s"
        if process.poll() is None:
            self.running = None
            process_lifetime.end_group(process, STOP_GRACE_S)
            log.warning("cancelled the closed-loop evaluation of step %d (%s)", step, reason)
            return
        self.collect()


def read_summary(path: Path) -> dict:
    """The side process's summary.json, with the fields the trainer records checked; ClosedLoopEvalError naming
    the file and what is wrong otherwise (a file cut short, edited, or from another tool)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as error:
        raise ClosedLoopEvalError(f"{path} is not readable JSON ({type(error).__name__}: {str(error)[:200]})") from None

    def number(value, low: float, high: float) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and low <= value <= high

    problem = None
    if not isinstance(result, dict):
        problem = f"a {type(result).__name__}, not a map"
    elif not isinstance(result.get("task"), str):
        problem = "no 'task' text"
    elif not (isinstance(result.get("episodes"), int) and result["episodes"] >= 1):
        problem = f"'episodes' is {result.get('episodes')!r}, not a positive integer"
    elif not (isinstance(result.get("successes"), int) and 0 <= result["successes"] <= result["episodes"]):
        problem = f"'successes' is {result.get('successes')!r}, not an integer from 0 to 'episodes'"
    elif not number(result.get("success_rate"), 0.0, 1.0):
        problem = f"'success_rate' is {result.get('success_rate')!r}, not a number from 0 to 1"
    elif not (isinstance(result.get("ci95"), list) and len(result["ci95"]) == 2
              and all(number(bound, 0.0, 1.0) for bound in result["ci95"])):
        problem = f"'ci95' is {result.get('ci95')!r}, not two numbers from 0 to 1"
    if problem:
        raise ClosedLoopEvalError(f"{path}: {problem}")
    return result


def evaluator(trainer: TrainerSection, run_dir: Path, logger) -> ClosedLoopEvaluator | None:
    """The run's evaluator, or None when trainer.closed_loop_eval.interval is 0 (off)."""
    settings = trainer.closed_loop_eval
    if not settings.interval:
        return None
    return ClosedLoopEvaluator(settings, run_dir, trainer.max_train_steps, logger.log_evaluation,
                               wait_limit_s=0.8 * trainer.collective_timeout_s,
                               devices=side_process_devices(settings, local_processes()))


# -- the side process -------------------------------------------------------------------------------------------

def start_server(ckpt: Path, device: str, out: Path, owner: int | None) -> tuple[subprocess.Popen, int]:
    """The policy server on `ckpt`, on a free loopback port, and that port once it listens. It dies with this
    process and stops when `owner` (the trainer) ends."""
    log_path = out / "server.log"
    owned = ["--owner_pid", str(owner)] if owner is not None else []
    with log_path.open("w") as output:
        server = process_lifetime.start([sys.executable, "-m", "DiT4DiT.serving.server", "--ckpt", str(ckpt), "--host",
                                         "127.0.0.1", "--port", "0", "--device", device, *owned], stdout=output,
                                        stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        found = SERVER_READY.search(log_path.read_text(errors="replace"))
        if found:
            return server, int(found.group(1))
        if server.poll() is not None:
            lines = log_path.read_text(errors="replace").strip().splitlines() or ["no output"]
            raise ClosedLoopEvalError(f"the policy server on {ckpt} exited ({server.returncode}): {lines[-1]}")
        time.sleep(0.5)
    stop_child(server)
    raise ClosedLoopEvalError(f"the policy server on {ckpt} did not listen within {SERVER_START_S} s; see {log_path}")


def stop_child(process: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM, then SIGKILL if it has not ended within grace_s (a stopped server would never act on SIGTERM)."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def side_process(args: argparse.Namespace, evaluate_options: list[str]) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seen = ", ".join(f"{v}={os.environ[v]}" for v in VISIBLE_DEVICES.values() if v in os.environ) or "as inherited"
    log.info("closed-loop side process: devices %s; %s", seen, use_every_core())
    server, port = start_server(Path(args.ckpt), args.device, out, args.owner_pid)
    # SIGTERM (a cancel) reaches the whole session; stopping here too lets the server go first.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with (out / "evaluate.log").open("w") as output:
            evaluation = process_lifetime.start(
                [args.python, "-m", "DiT4DiT.evaluation.metaworld", "evaluate", "--server", f"127.0.0.1:{port}",
                 "--wait_s", "60", "--task", args.task, "--episodes", str(args.episodes), "--max_steps",
                 str(args.max_steps), "--seed", str(args.seed), "--num_envs", str(args.num_envs), "--videos", "1",
                 "--out", str(out), *evaluate_options], cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
            try:
                code = evaluation.wait()
            finally:
                if evaluation.poll() is None:  # this process is stopping (SIGTERM): its evaluation with it
                    stop_child(evaluation)
    finally:
        stop_child(server)
    if code:
        lines = (out / "evaluate.log").read_text(errors="replace").strip().splitlines() or ["no output"]
        raise ClosedLoopEvalError(f"the Meta-World evaluation exited with {code}: {lines[-1]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from DiT4DiT.logging_setup import configure_logging

    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.training.closed_loop_eval",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--max_steps", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--num_envs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--python", default=str(DEFAULT_PYTHON), help="the simulator environment's Python")
    parser.add_argument("--owner_pid", type=int, default=None,
                        help="the trainer: this process dies with it (it must be the parent), its server stops with it")
    args = parser.parse_args(argv[:split])
    if args.owner_pid is not None:
        process_lifetime.die_with_parent(args.owner_pid)
    configure_logging()
    return run_main(lambda: side_process(args, argv[split + 1:]))


if __name__ == "__main__":
    sys.exit(main())
