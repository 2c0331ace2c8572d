#!/usr/bin/env bash
# Launch DiT4DiT training: the plan, CANN's environment, `accelerate launch`, a log.
#
#   bash scripts/train_8p.sh [--option=value ...] [--a.b.c=value ...] [--dry-run]
#   bash scripts/train_8p.sh --help      every option, with its host default
#
# This script only finds the Python and hands over to `python -m DiT4DiT.launch` (DiT4DiT/launch/), which decides
# everything (host kind, nodes, values and their sources, the environment, the command, preflight; `--dry-run`
# prints it), sources CANN's set_env.sh, and runs the command in the repository root with its output in the run
# dir's log, signals forwarded to the whole training process group and a stopped rank killed (docs/ascend.md).
# PYTHON picks the interpreter (3.10 or 3.11; default: python on PATH).
# Exit status: 2 for usage and preflight problems, 76 when a rank stalled, else that of accelerate launch.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3 || echo python)}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
# This checkout's launcher, wherever it is called from: `python -m` would put the caller's folder first on
# sys.path, and another checkout there (or a DiT4DiT installed elsewhere) would plan and run its own code.
exec "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); from DiT4DiT.launch.run import main; sys.exit(main())' \
    "$REPO" "$@"
