#!/usr/bin/env bash
# Launch DiT4DiT training: the plan, CANN's environment, `accelerate launch`, a log.
#
#   bash scripts/train_8p.sh [--option=value ...] [--a.b.c=value ...] [--dry-run]
#   bash scripts/train_8p.sh --help      every option, with its host default
#
# `python -m DiT4DiT.launch` decides everything (host kind, nodes, values and their sources, the environment,
# the command, preflight) and `--dry-run` prints it, the Ascend environment included; this script then sources
# CANN's set_env.sh (<root>/cann or <root>/ascend-toolkit, then <root>/nnal/atb; or CANN_SET_ENV), exports what
# the plan says, and runs the command in the repository root with its output in the run dir's log.
# PYTHON picks the interpreter (3.10 or 3.11; default: python on PATH).
# SIGTERM / SIGINT to the launcher go to the whole training process group; the launcher waits for it.
# A rank of this node stopped (SIGSTOP, state T) for longer than trainer.stall_timeout_s plus the heartbeat's
# look (after its peers named it) gets SIGKILL: it cannot act on torchrun's SIGTERM, and a rank alone on its
# node has no local peer to end it.
# Exit status: 2 for usage and preflight problems, 76 when a rank stalled (named by a peer or killed here), else
# that of accelerate launch (non-zero if any rank fails).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3 || echo python)}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}

plan=$(mktemp "${TMPDIR:-/tmp}/dit4dit-plan.XXXXXX")
status=$(mktemp "${TMPDIR:-/tmp}/dit4dit-status.XXXXXX")  # exit codes the ranks chose (accelerate says 1)
trap 'rm -f "$plan" "$status"' EXIT
# Relative paths in the options are the caller's: the plan is made here, before `cd "$REPO"`.
"$PYTHON" -m DiT4DiT.launch --shell_plan="$plan" "$@" || exit $?
[[ -s $plan ]] || exit 0  # --help or --dry-run: everything was printed
source "$plan"  # CANN_SCRIPTS, plan_exports, CMD, RUN_DIR, LOG, STALL_KILL_AFTER_S

source_cann() {  # a function, so set_env.sh sees no positional arguments (atb's parses them)
    local script
    for script in "${CANN_SCRIPTS[@]}"; do
        set +eu; source "$script"; set -eu  # vendor scripts are not written for strict mode
    done
}
source_cann
plan_exports  # after CANN, so that our LD_LIBRARY_PATH and PYTHONPATH entries come first

cd "$REPO"
mkdir -p "$RUN_DIR"
echo "=== $(date -Is) $(printf '%q ' "${CMD[@]}")" >>"$LOG"
# The trainer runs in a session of its own, so a signal reaches all of its processes (accelerate, torchrun's
# agent, every rank) and none is orphaned; tee ignores SIGINT/SIGTERM to log the trainer's last words.
fifo=$(mktemp -u "${TMPDIR:-/tmp}/dit4dit-log.XXXXXX")
mkfifo "$fifo"
(trap '' INT TERM; exec tee -a "$LOG") <"$fifo" &
TEE_PID=$!
DIT4DIT_STATUS_FILE=$status setsid "${CMD[@]}" >"$fifo" 2>&1 &
TRAIN_PID=$!

kill_stopped_ranks() {  # the ranks are the children of accelerate's process (torchrun's agent runs in it)
    local -A since=() seen
    local pid state
    while sleep 1 && kill -0 "$TRAIN_PID" 2>/dev/null; do  # ends with accelerate (or an orphaned launcher)
        [[ $(ps -o stat= -p "$TRAIN_PID" 2>/dev/null) == T* ]] && continue  # the whole job stopped on purpose
        seen=()
        while read -r pid state; do
            [[ $state == T* ]] || continue
            seen[$pid]=1
            since[$pid]=${since[$pid]:-$SECONDS}
            ((SECONDS - since[$pid] >= STALL_KILL_AFTER_S)) || continue
            kill -KILL "$pid" 2>/dev/null || continue
            echo 76 >>"$status"
            echo "train_8p.sh: SIGKILL to rank process $pid: stopped for $((SECONDS - since[$pid])) s, longer than" \
                 "trainer.stall_timeout_s and the heartbeat's look ($STALL_KILL_AFTER_S s)" | tee -a "$LOG" >&2
        done < <(ps -o pid=,stat= --ppid "$TRAIN_PID" 2>/dev/null)
        for pid in "${!since[@]}"; do [[ -n ${seen[$pid]:-} ]] || unset "since[$pid]"; done
    done
}
WATCH_PID=""
if ((STALL_KILL_AFTER_S > 0)); then
    kill_stopped_ranks &
    WATCH_PID=$!
fi
SIGNALLED=""
forward() { SIGNALLED=$1; kill -s "$1" -- "-$TRAIN_PID" 2>/dev/null || true; }
trap 'forward TERM' TERM
trap 'forward INT' INT
while :; do  # a trapped signal interrupts wait; the trainer is waited for until it has really ended
    if wait "$TRAIN_PID"; then rc=0; else rc=$?; fi
    kill -0 "$TRAIN_PID" 2>/dev/null || break
done
while kill -0 -- "-$TRAIN_PID" 2>/dev/null; do sleep 1; done  # ranks that outlive accelerate (still saving)
[[ -z $WATCH_PID ]] || { kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null || true; }
((rc == 0)) || ! grep -qx 76 "$status" || rc=76  # a rank stalled: accelerate reports any failure as 1
wait "$TEE_PID" || true
rm -f "$fifo"
echo "=== exit code $rc${SIGNALLED:+ (after SIG$SIGNALLED, forwarded to the training process group)}" >>"$LOG"
((rc == 0)) || echo "train_8p.sh: training failed (exit code $rc; each rank's exit code is in the log): $LOG" >&2
exit "$rc"
