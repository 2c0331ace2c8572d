"""Environment-process workers for the parallel evaluation tests: no simulator, one result per episode (its
square), and an episode on which the process kills itself, raises, stops itself (SIGSTOP) or hangs, as a simulator
crash, error or freeze would."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from DiT4DiT.evaluation.errors import BadArgument


def squares(setup: dict, episodes: list[int], report) -> None:
    """setup: {"crash_at": episode or None, "crashes": how many times, "marks": folder counting them,
    "raise_at": episode or None, "stop_at": episode or None, "stops": how many times, "hang_from": episode or None}.
    Each process writes its pid to marks/pids.<episode> before each episode."""
    marks = Path(setup["marks"])
    for episode in episodes:
        (marks / f"pid.{episode}.{os.getpid()}").touch()
        if episode == setup.get("raise_at"):
            raise BadArgument(f"episode {episode} cannot run")
        if episode == setup.get("crash_at") and len(list(marks.glob("crash.*"))) < setup["crashes"]:
            (marks / f"crash.{len(list(marks.glob('crash.*')))}").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if episode == setup.get("stop_at") and len(list(marks.glob("stop.*"))) < setup["stops"]:
            (marks / f"stop.{len(list(marks.glob('stop.*')))}").touch()
            os.kill(os.getpid(), signal.SIGSTOP)
        if setup.get("hang_from") is not None and episode >= setup["hang_from"]:
            time.sleep(600)
        report(episode, episode * episode)
