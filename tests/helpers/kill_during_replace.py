"""Run a tool that writes its --out folder beside it and renames it into place, but SIGKILL it at that rename.

    python tests/helpers/kill_during_replace.py MODULE TOOL_ARGS...

A real kill -9 between removing (or renaming aside) the old folder and renaming the new one in, which polling from
outside cannot hit reliably.
"""

import os
import pathlib
import runpy
import signal
import sys

original_rename = pathlib.Path.rename


def rename_or_die(self, target):
    target = pathlib.Path(target)
    if self.name.startswith(f".{target.name}.") and ".replaced-" not in self.name:  # the new folder onto --out
        os.kill(os.getpid(), signal.SIGKILL)
    return original_rename(self, target)


if __name__ == "__main__":
    pathlib.Path.rename = rename_or_die
    module = sys.argv.pop(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
