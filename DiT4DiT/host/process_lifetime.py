"""Processes we start end with the process that owns them (standard library only).

- `die_with_parent(parent_pid)`: on Linux the kernel sends this process SIGKILL when its parent ends (the
  parent-death signal, prctl PR_SET_PDEATHSIG; strictly, when the parent's thread that started it ends: we start
  children from main threads). SIGKILL, not SIGTERM: it also ends a stopped (SIGSTOP) process, and nothing we
  start this way has state to save. A child arms it first thing, or `start()` arms it between fork and exec.
- `until_ended(pid)`: returns once another process (an owner that is not our parent) has ended; a server started
  for one run watches that run's process with it (`--owner_pid`).
- `end_group(process, grace_s)`: ends a child started in a session of its own and everything it started: SIGTERM
  (with SIGCONT, so that stopped members can act on it), SIGKILL for what is left after `grace_s`; never unbounded.

Elsewhere than Linux the death signal is not armed, and `until_ended` polls.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 1.0  # where no pidfd exists: how often until_ended looks
STATES = {"T": "stopped", "t": "stopped by a debugger", "S": "sleeping", "D": "in uninterruptible I/O",
          "R": "running", "Z": "a zombie"}


@functools.cache
def _prctl():
    """libc's prctl, or None off Linux. Looked up before any fork: a lookup between fork and exec could wait for
    a loader lock another thread held at the fork."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int) -> None:
    """This process gets SIGKILL when its parent ends; when the parent is already gone (this process's parent is
    no longer `parent_pid`), it ends now."""
    prctl = _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent_pid:  # the parent ended before the signal was armed: it will never come
        os.kill(os.getpid(), signal.SIGKILL)


def start(command: list[str], **popen) -> subprocess.Popen:
    """subprocess.Popen(command, **popen), its process armed to die with this one before it execs (for processes
    started from a single-threaded program: a preexec function after fork is unsafe beside other threads)."""
    _prctl()
    return subprocess.Popen(command, preexec_fn=functools.partial(die_with_parent, os.getpid()), **popen)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


async def until_ended(pid: int) -> None:
    """Returns once process `pid` has ended (at once if it has already). A pidfd (Linux 5.3+) becomes readable
    when the process exits, a zombie included, and cannot be fooled by a new process reusing the pid."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here: look every POLL_S
        while alive(pid):
            await asyncio.sleep(POLL_S)
        return
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str:
    """A process's state from /proc in words (stopped, sleeping, ...), or "state unknown"."""
    fields = _stat(pid)
    return "state unknown" if fields is None else STATES.get(fields[0], f"state {fields[0]}")


def how_it_ended(exitcode: int | None) -> str:
    """A process's end in words, from its exit code (negative: the signal that ended it)."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def group_members(group: int) -> list[int]:
    """The processes of process group `group` that have not ended (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def exited(process: subprocess.Popen) -> bool:
    """Whether `process` has ended, without reaping it: until it is reaped its pid, and so its group's id, cannot
    be given to another process, so signalling the group still reaches only what it started."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere
        return True


def end_group(process: subprocess.Popen, grace_s: float) -> None:
    """End `process` (started with start_new_session=True, so it leads its group) and every process of its group:
    SIGTERM and SIGCONT, then SIGKILL to whatever is left after `grace_s`; then reap it."""
    group = process.pid
    for signum in (signal.SIGTERM, signal.SIGCONT):
        _signal_group(group, signum)
    deadline = time.monotonic() + grace_s
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(group, signal.SIGKILL)
    process.wait()


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):  # nothing left in it
        pass
