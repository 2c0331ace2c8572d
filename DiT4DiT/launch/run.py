"""python -m DiT4DiT.launch [options] [--dry-run], as scripts/train_8p.sh runs it: the launcher's process.

`main` plans the launch (DiT4DiT/launch/plan.py), prints it with --dry-run, and otherwise runs it: exit 2 with
every problem and its fix when preflight refuses to start, or with the one-line reason when the options or the
config cannot work at all; else the trainer's exit status.

`supervise` runs a plan: CANN's environment, the plan's exports, then the training command in a session of its
own, its output into the run dir's log, signals forwarded, a stopped rank killed, and the exit status the ranks
chose. The training command runs in the repository root, in a process group of its own, so that SIGTERM / SIGINT
to the launcher reach all of its processes (accelerate, torchrun's agent, every rank) and none is orphaned; the
launcher logs the trainer's last words and waits until every process of the group has ended (ranks still saving).
A rank of this node stopped (SIGSTOP, state T) for longer than `plan.stall_kill_after()` gets SIGKILL: it cannot
act on torchrun's SIGTERM, and a rank alone on its node has no local peer to end it.

Only the standard library and our torch-free modules are imported at the top: `require` must say what is missing
before the planning code imports the config loader's packages.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from DiT4DiT.errors import run_main
from DiT4DiT.facts import REPO
from DiT4DiT.launch import options
from DiT4DiT.launch.environment import Setting
from DiT4DiT.launch.options import PROG
from DiT4DiT.requirements_check import TRAINING, require
from DiT4DiT.training.heartbeat import EXIT_STALLED, STATUS_FILE_VARIABLE, process_stat

if TYPE_CHECKING:
    from DiT4DiT.launch.plan import Plan

FORWARDED = (signal.SIGTERM, signal.SIGINT)
BASH_ONLY = ("_", "SHLVL")  # what bash itself sets, not what the scripts export


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        decided = prepare(sys.argv[1:] if argv is None else argv)
        if isinstance(decided, int):
            return decided
        return supervise(decided)

    return run_main(body, PROG)


def prepare(argv: list[str]):
    """The plan to run, or the exit status when there is nothing to run (--help, --dry-run, refused); what a
    person needs to read is printed here."""
    require(PROG, TRAINING, launcher=True)  # --help too: the trainer runs with this Python
    environment = dict(os.environ)  # the trainer's, before the line below
    # No torch_npu autoload should anything here import torch (a --device=cuda probe, a memory plan): CANN is not
    # sourced yet.
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    from DiT4DiT.launch import plan as planning

    opts = options.parse(argv, Path.cwd())
    plan = planning.build(opts, planning.Facts(env=environment))
    if opts.dry_run:
        print(planning.dry_run(plan))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if plan.problems:
        print(f"preflight: {len(plan.problems)} problem(s), nothing started:", file=sys.stderr)
        print("\n".join(f"  {p}" for p in plan.problems), file=sys.stderr)
        return 2
    if opts.dry_run:
        print("preflight: ok")
        return 0
    return plan


def cann_environment(scripts: list[str], env: dict[str, str]) -> dict[str, str]:
    """`env` after sourcing CANN's set_env.sh scripts in order, read back from bash (`env` when there are none).

    Sourced as the vendor writes them to be: not in strict mode, and with no positional arguments (NNAL/ATB's
    script parses them). What they print goes to stderr, so that stdout carries only the environment.
    """
    if not scripts:
        return dict(env)
    sources = "".join(f"source {shlex.quote(script)} >&2; " for script in scripts)
    done = subprocess.run(["bash", "-c", f"set +eu; {sources}env -0"], env=env, stdout=subprocess.PIPE, check=True)
    after = dict(item.split("=", 1) for item in done.stdout.decode(errors="surrogateescape").split("\0") if "=" in item)
    for name in BASH_ONLY:
        after.pop(name, None)
        if name in env:
            after[name] = env[name]
    return after


def apply(settings: list[Setting], env: dict[str, str]) -> dict[str, str]:
    """`env` with the plan's exports: set, unset, or put in front of what CANN's scripts left."""
    env = dict(env)
    for s in settings:
        if not s.exported:
            continue
        if s.value is None:
            env.pop(s.name, None)
        elif s.prepend and env.get(s.name):
            env[s.name] = f"{s.value}:{env[s.name]}"
        else:
            env[s.name] = s.value
    return env


def training_environment(plan: Plan) -> dict[str, str]:
    """The environment the training command gets: the launcher's, CANN's scripts, then the plan's exports (after
    CANN, so that our LD_LIBRARY_PATH entries come first)."""
    return apply(list(plan.env.settings.values()), cann_environment(plan.cann_scripts, plan.env.env))


class Log:
    """The run dir's log, appended to by the output copier and the stall watcher."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "ab", buffering=0)
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            self.file.write(data)

    def say(self, line: str) -> None:
        """One line into the log and onto stderr."""
        self.write(f"{line}\n".encode())
        print(line, file=sys.stderr, flush=True)


def copy_output(pipe: int, log: Log) -> None:
    """The trainer's output to our stdout and the log, until every process holding the pipe has closed it."""
    out = getattr(sys.stdout, "buffer", None)
    while data := os.read(pipe, 1 << 16):
        log.write(data)
        if out is not None:
            try:
                out.write(data)
                out.flush()
            except (BrokenPipeError, ValueError):  # nobody reads our stdout any more: the log still gets it all
                out = None
    os.close(pipe)


def stopped_children(parent: int) -> set[int]:
    """The children of `parent` that are stopped (state T)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := process_stat(entry)) and stat[0] == parent and stat[1] == "T":
            found.add(int(entry))
    return found


def kill_stopped_ranks(train_pid: int, after_s: int, log: Log, status: Path, done: threading.Event) -> None:
    """SIGKILL each rank (a child of accelerate's process, in which torchrun's agent runs) stopped for `after_s`."""
    since: dict[int, float] = {}
    while not done.wait(1):
        own = process_stat(train_pid)
        if own is None or own[1] == "T":  # ended, or the whole job stopped on purpose
            continue
        stopped = stopped_children(train_pid)
        since = {pid: since.get(pid, time.monotonic()) for pid in stopped}
        for pid, start in list(since.items()):
            waited = time.monotonic() - start
            if waited < after_s:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            with open(status, "a") as record:
                record.write(f"{EXIT_STALLED}\n")
            log.say(f"{PROG}: SIGKILL to rank process {pid}: stopped for {waited:.0f} s, longer than "
                    f"trainer.stall_timeout_s and the heartbeat's look ({after_s} s)")
            del since[pid]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member now runs as another user: still alive
        return True
    return True


def supervise(plan: Plan) -> int:
    """Run the plan's command; its exit status (76 when a rank stalled, 128+N for a signal N)."""
    env = training_environment(plan)
    log = Log(REPO / plan.log)  # a relative run dir is the trainer's, which runs in the repository root
    log.write(f"=== {datetime.now().astimezone().isoformat(timespec='seconds')} {shlex.join(plan.command)}\n".encode())
    fd, status_name = tempfile.mkstemp(prefix="dit4dit-status.")  # exit codes the ranks chose (accelerate says 1)
    os.close(fd)
    status = Path(status_name)
    received: list[signal.Signals] = []
    proc: subprocess.Popen | None = None

    def forward(signum, _frame):
        received.append(signal.Signals(signum))
        if proc is not None:
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    sys.stdout.flush()  # what the launcher said comes before the trainer's output
    read_end, write_end = os.pipe()
    try:
        try:
            proc = subprocess.Popen(plan.command, cwd=REPO, env={**env, STATUS_FILE_VARIABLE: str(status)},
                                    stdout=write_end, stderr=write_end, start_new_session=True)
        finally:
            os.close(write_end)
        if received:  # a signal before the trainer had a process group
            os.killpg(proc.pid, received[-1])
        copier = threading.Thread(target=copy_output, args=(read_end, log))
        copier.start()
        done = threading.Event()
        after_s = plan.stall_kill_after()
        watcher = threading.Thread(target=kill_stopped_ranks, args=(proc.pid, after_s, log, status, done), daemon=True)
        if after_s > 0:
            watcher.start()
        rc = proc.wait()
        while group_alive(proc.pid):  # ranks that outlive accelerate (still saving)
            time.sleep(1)
        done.set()
        if watcher.is_alive():
            watcher.join()
        rc = 128 - rc if rc < 0 else rc
        if rc != 0 and str(EXIT_STALLED) in status.read_text().split():  # accelerate reports any failure as 1
            rc = EXIT_STALLED
        copier.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        status.unlink(missing_ok=True)
    after = f" (after {received[-1].name}, forwarded to the training process group)" if received else ""
    log.write(f"=== exit code {rc}{after}\n".encode())
    log.file.close()
    if rc != 0:
        print(f"{PROG}: training failed (exit code {rc}; each rank's exit code is in the log): {plan.log}",
              file=sys.stderr)
    return rc
