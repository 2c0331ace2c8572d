#!/usr/bin/env bash
# CI step for the NPU patch: apply patches/dit4dit_npu.patch to a fresh export of HEAD, check that it is
# current, applies once, reverses cleanly, and that the patched tree trains: a 100-step CPU smoke run whose
# loss falls and which leaves checkpoints.
#
#   bash scripts/ci_patched_smoke.sh [extra launcher options, e.g. --trainer.logging_frequency=5]
#
# Environment: PYTHON (default: python on PATH), KEEP_EXPORT=1 keeps the temporary export for inspection.
# The tiny model and dataset are taken from playground/ of this checkout (generated there if missing).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
REGENERATE="python scripts/port_to_npu.py . --emit-patch patches/dit4dit_npu.patch"
TINY_MODEL=$REPO/playground/Pretrained_models/Cosmos-Predict2.5-tiny
TINY_DATA=$REPO/playground/Datasets/robotwin_tiny
STEPS=100

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dit4dit_patched.XXXXXX")
TREE=$WORK/tree
PATCH=$TREE/patches/dit4dit_npu.patch  # HEAD's patch, as committed
if [[ ${KEEP_EXPORT:-0} == 1 ]]; then trap 'echo "export kept in $WORK"' EXIT; else trap 'rm -rf "$WORK"' EXIT; fi

step() { echo "== $*"; }
fail() { echo "ci_patched_smoke.sh: $*" >&2; exit 1; }
git_tree() { git -C "$TREE" -c user.name=ci -c user.email=ci@localhost "$@"; }

step "export HEAD into $TREE"
mkdir -p "$TREE"
git -C "$REPO" archive --format=tar HEAD | tar -x -C "$TREE"
git_tree init -q && git_tree add -A && git_tree commit -qm "export of $(git -C "$REPO" rev-parse --short HEAD)"
[[ -f $PATCH ]] || fail "HEAD has no patches/dit4dit_npu.patch; generate it with: $REGENERATE"

step "git apply --check, then apply"
if ! check=$(git_tree apply --check "$PATCH" 2>&1); then
    echo "$check" >&2  # git names the file and the line of the hunk that failed
    fail "the patch does not apply to HEAD: DiT4DiT/training/train.py or DiT4DiT/model/framework/DiT4DiT.py changed \
since it was generated; regenerate it from the unpatched tree with: $REGENERATE"
fi
git_tree apply "$PATCH"
grep -q "from torch_npu.contrib import transfer_to_npu" "$TREE/DiT4DiT/training/train.py" || fail "patched train.py lacks the NPU import"

step "applying twice is detected"
if git_tree apply --check "$PATCH" 2>/dev/null; then
    fail "the patch applies a second time on the patched tree; it would duplicate its edits"
fi
git_tree apply -R --check "$PATCH" || fail "the patched tree is not recognised as patched (git apply -R --check fails)"
echo "a second git apply fails and git apply -R --check succeeds: the tree is already patched"

step "the tool sees the patched tree as already ported"
"$PYTHON" "$REPO/scripts/port_to_npu.py" "$TREE" | grep -q "already ported" || fail "port_to_npu.py would edit the patched tree again"

step "git apply -R restores the original tree"
git_tree apply -R "$PATCH"
[[ -z $(git_tree status --porcelain) ]] || { git_tree status --short >&2; fail "git apply -R left changes behind"; }

step "the checked-in patch is current (port_to_npu.py --check on the unpatched export)"
"$PYTHON" "$REPO/scripts/port_to_npu.py" "$TREE" --check --patch "$PATCH" \
    || fail "patches/dit4dit_npu.patch does not match what the tool makes of HEAD's two files"
git_tree apply "$PATCH"

step "tiny model and dataset"
[[ -f $TINY_MODEL/model_index.json ]] || (cd "$REPO" && "$PYTHON" -m DiT4DiT.tools.tiny_cosmos --out "$TINY_MODEL")
[[ -f $TINY_DATA/.complete ]] || (cd "$REPO" && "$PYTHON" -m DiT4DiT.tools.tiny_robotwin --out "$TINY_DATA" --overwrite && touch "$TINY_DATA/.complete")

step "$STEPS-step CPU smoke run on the patched tree"
RUN_DIR=$WORK/runs/patched_smoke
PYTHON=$PYTHON bash "$TREE/scripts/train_8p.sh" --max_train_steps=$STEPS --run_root_dir="$WORK/runs" --run_id=patched_smoke \
    --base_model="$TINY_MODEL" --data_root_dir="$TINY_DATA" "$@" || fail "the smoke run failed; its log: $RUN_DIR/train.log"

step "check the run: the patched code ran, the loss fell, checkpoints exist"
grep -q "torch_npu is not importable" "$RUN_DIR/train.log" || fail "$RUN_DIR/train.log shows no sign of the patched autocast"
"$PYTHON" - "$RUN_DIR" "$STEPS" <<'EOF'
import json
import sys
from pathlib import Path

run_dir, steps = Path(sys.argv[1]), int(sys.argv[2])
records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
losses = [(r["step"], r["total_loss"]) for r in records if "total_loss" in r]
if len(losses) < 4 or losses[-1][0] != steps:
    sys.exit(f"{run_dir}/metrics.jsonl: expected logged total_loss up to step {steps}, found steps {[s for s, _ in losses]}")
k = max(1, len(losses) // 4)
first, last = sum(v for _, v in losses[:k]) / k, sum(v for _, v in losses[-k:]) / k
if not last < first:
    sys.exit(f"{run_dir}/metrics.jsonl: total_loss did not fall (mean of the first {k} logs {first:.4f}, last {k} {last:.4f})")
checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
if not checkpoints:
    sys.exit(f"{run_dir}/checkpoints holds no weights file")
print(f"total_loss {first:.4f} -> {last:.4f} (mean of the first / last {k} logs); checkpoints: {', '.join(checkpoints)}")
EOF
step "the patched run resumes from its last training state"
PYTHON=$PYTHON bash "$TREE/scripts/train_8p.sh" --max_train_steps=$((STEPS + 20)) --run_root_dir="$WORK/runs" \
    --run_id=patched_smoke --base_model="$TINY_MODEL" --data_root_dir="$TINY_DATA" --trainer.is_resume=true "$@" \
    || fail "resuming the smoke run failed; its log: $RUN_DIR/train.log"
grep -q "resumed from .*steps_${STEPS}_training_state at step $STEPS" "$RUN_DIR/train.log" \
    || fail "$RUN_DIR/train.log: the second launch did not resume from step $STEPS"
[[ -f $RUN_DIR/checkpoints/steps_$((STEPS + 20))_pytorch_model.pt ]] || fail "no checkpoint at step $((STEPS + 20)) after resuming"

step "patched tree OK"
