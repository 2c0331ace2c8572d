"""Processes we start end with the process that owns them (standard library only).

- `die_with_parent(parent_pid)`: on Linux the kernel sends this process SIGKILL when its parent ends (the
  parent-death signal, prctl PR_SET_PDEATHSIG; strictly, when the parent's thread that started it ends: we start
  children from main threads). SIGKILL, not SIGTERM: it also ends a stopped (SIGSTOP) process, and nothing we
  start this way has state to save. A child arms it first thing, or `start()` arms it between fork and exec.
- `until_ended(pid)`: returns once another process (an owner that is not our parent) has ended; a server started
  for one run watches that run's process with it (`--owner_pid`).

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

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 1.0  # where no pidfd exists: how often until_ended looks


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
    ended = loop.create_future()
    loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)
