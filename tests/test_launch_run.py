"""What the launcher does around the trainer (DiT4DiT/launch/run.py), in this process: CANN's set_env.sh
scripts read back through bash, and the stopped ranks it looks for. The whole run (log, signals, exit status, the
stall kill) is tests/test_launcher.py's and tests/test_heartbeat.py's, through scripts/train_8p.sh."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from DiT4DiT.launch import run

# Written as the vendor's are: no strict mode, unset variables read, a failing command, output on stdout, and
# NNAL/ATB's argument parsing (it would take the launcher's own arguments as its options).
TOOLKIT = """echo "toolkit environment set"
false
export ASCEND_HOME_PATH={root}/cann
export LD_LIBRARY_PATH=$ASCEND_HOME_PATH/lib64:$LD_LIBRARY_PATH
export TWO_LINES="a
b"
"""
ATB = """export ATB_ARGUMENTS="$#:$*"
export ATB_HOME_PATH=$ASCEND_HOME_PATH/../nnal/atb
"""


def test_cann_scripts_are_sourced_in_order_without_strict_mode_or_arguments(tmp_path):
    toolkit, atb = tmp_path / "set_env.sh", tmp_path / "atb_set_env.sh"
    toolkit.write_text(TOOLKIT.format(root=tmp_path))
    atb.write_text(ATB)
    env = {"PATH": os.environ["PATH"], "KEPT": "x y", "SHLVL": "4"}
    after = run.cann_environment([str(toolkit), str(atb)], env)
    assert after["ASCEND_HOME_PATH"] == f"{tmp_path}/cann" and after["LD_LIBRARY_PATH"] == f"{tmp_path}/cann/lib64:"
    assert after["ATB_HOME_PATH"] == f"{tmp_path}/cann/../nnal/atb"  # the second saw what the first exported
    assert after["ATB_ARGUMENTS"] == "0:"
    assert after["TWO_LINES"] == "a\nb" and after["KEPT"] == "x y" and after["SHLVL"] == "4" and "_" not in after
    assert run.cann_environment([], env) == env  # nothing to source: bash is not run


def test_a_stopped_child_is_seen_as_stopped():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid not in run.stopped_children(os.getpid())
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 60  # a deadline on a loaded machine, not a measure
        while child.pid not in run.stopped_children(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert child.pid in run.stopped_children(os.getpid())
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        child.wait()
