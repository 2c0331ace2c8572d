#!/usr/bin/env bash
# Launch DiT4DiT training: Ascend environment, preflight checks, `accelerate launch`, a log in the run dir.
#
#   bash scripts/train_8p.sh [--option=value ...] [--a.b.c=value ...] [--dry-run]
#
# Options (NPU-host default / CPU-host default; "yaml" = not passed, the config file decides):
#   --num_processes=N             processes = devices (visible NPUs / 1). Atlas 800T A3: 16 per node, A2: 8
#   --max_train_steps=N           trainer.max_train_steps (100000 / 100)
#   --save_interval=N             trainer.save_interval (10000 or max_train_steps if fewer / yaml)
#   --per_device_batch_size=N     datasets.vla_data.per_device_batch_size (4 / yaml)
#   --data_mix=NAME               datasets.vla_data.data_mix (robotwin / yaml)
#   --data_root_dir=DIR           datasets.vla_data.data_root_dir (playground/Datasets/RoboTwin / .../robotwin_tiny)
#   --base_model=DIR              framework.cosmos25.base_model (playground/Pretrained_models/Cosmos-Predict2.5-2B / -tiny)
#   --config_yaml=FILE            (DiT4DiT/config/robotwin/dit4dit_robotwin.yaml / DiT4DiT/config/tiny/dit4dit_tiny.yaml)
#   --framework_name=NAME         framework.name (DiT4DiT / yaml)
#   --freeze_module_list=A,B      trainer.freeze_modules (text encoder + VAE / yaml)
#   --action_video_freq_ratio=N   datasets.vla_data.action_video_freq_ratio (yaml: it must match video_delta_indices)
#   --run_root_dir=DIR            run_root_dir (./runs)
#   --run_id=NAME                 run_id (dit4dit_robotwin / dit4dit_tiny); the run dir is <run_root_dir>/<run_id>
#   --launch_config=FILE          accelerate config (DiT4DiT/config/deepseeds/deepspeed_zero2.yaml / cpu.yaml)
#   --soc=a2|a3                   override the A2/A3 detection (also DIT4DIT_SOC); A3 gets TORCH_HCCL_ZERO_COPY=1
#   --a.b.c=value | --a.b.c value any other trainer config key, passed through unchanged
#   --dry-run                     print host, environment, command and preflight result; start nothing
#   --help                        this text
# Options also accept "--name value"; their config keys (e.g. --framework.cosmos25.base_model=DIR) set them too.
# Relative paths you pass are relative to your working directory; the launch runs in the repository root.
#
# Environment knobs: PYTHON (interpreter with the stack; default: python on PATH), DIT4DIT_TRAIN_ENTRY (script
# to launch instead of DiT4DiT/training/train.py), ASCEND_INSTALL_ROOT (/usr/local/Ascend), CANN_SET_ENV (an
# explicit set_env.sh), and any variable below, which keeps your value if already set.
# NPU host (npu-smi lists devices): sources CANN's set_env.sh (<root>/cann or <root>/ascend-toolkit, then
# <root>/nnal/atb), sets TASK_QUEUE_ENABLE=2, CPU_AFFINITY_CONF=1, PYTORCH_NPU_ALLOC_CONF=expandable_segments:True,
# TORCH_HCCL_ZERO_COPY=1 (A3 only; removed on A2), HCCL_CONNECT_TIMEOUT=1200, HCCL_EXEC_TIMEOUT=1800, and puts
# torch/lib and torch_npu/lib of $PYTHON first on LD_LIBRARY_PATH. Any host: WANDB_MODE=offline, PYTHONPATH.
# Other hosts (CPU, CI smoke runs) skip the Ascend part and run the tiny config with the CPU launch config.
# Preflight (before anything starts): num_processes <= visible NPUs, CANN found, torch_npu installed, the NPU
# patch applied, base model and data root complete.
# Exit status: 2 for usage and preflight problems, else that of accelerate launch (non-zero if any rank fails).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3 || echo python)}
TRAIN_ENTRY=${DIT4DIT_TRAIN_ENTRY:-DiT4DiT/training/train.py}
ASCEND_INSTALL_ROOT=${ASCEND_INSTALL_ROOT:-/usr/local/Ascend}
PATCH_MARK="from torch_npu.contrib import transfer_to_npu"
TINY_MODEL=./playground/Pretrained_models/Cosmos-Predict2.5-tiny
TINY_DATA=./playground/Datasets/robotwin_tiny

die() { echo "train_8p.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# Launcher option -> trainer config key ("" = launcher-only option).
declare -A KEY=(
    [num_processes]="" [config_yaml]="" [launch_config]="" [soc]=""
    [max_train_steps]=trainer.max_train_steps [save_interval]=trainer.save_interval [per_device_batch_size]=datasets.vla_data.per_device_batch_size
    [data_mix]=datasets.vla_data.data_mix [data_root_dir]=datasets.vla_data.data_root_dir
    [base_model]=framework.cosmos25.base_model [framework_name]=framework.name
    [freeze_module_list]=trainer.freeze_modules [action_video_freq_ratio]=datasets.vla_data.action_video_freq_ratio
    [run_root_dir]=run_root_dir [run_id]=run_id
)
declare -A OPTION_OF_KEY=()
for name in "${!KEY[@]}"; do [[ -n ${KEY[$name]} ]] && OPTION_OF_KEY[${KEY[$name]}]=$name; done
declare -A OPT=()
PASSTHROUGH=()
DRY_RUN=0

while (($#)); do
    arg=$1; shift
    case $arg in
        -h|--help) usage; exit 0 ;;
        --dry-run|--dry_run) DRY_RUN=1; continue ;;
        --*=*) name=${arg%%=*}; name=${name#--}; value=${arg#*=}; given=("$arg") ;;
        --?*) name=${arg#--}
              if (($#)) && [[ $1 != --* ]]; then value=$1; given=("$arg" "$1"); shift; else value=true; given=("$arg"); fi ;;
        *) die "unexpected argument '$arg'; options look like --name=value (see --help)" ;;
    esac
    [[ -n ${OPTION_OF_KEY[$name]:-} ]] && name=${OPTION_OF_KEY[$name]}
    if [[ -v KEY[$name] ]]; then
        case $name in base_model|data_root_dir|config_yaml|launch_config|run_root_dir)
            [[ $value == /* ]] || value=$PWD/$value ;;
        esac
        OPT[$name]=$value
    elif [[ $name == *.* ]]; then
        PASSTHROUGH+=("${given[@]}")
    else
        die "unknown option --$name (see --help); trainer config keys are dotted, e.g. --trainer.save_interval=1000"
    fi
done
[[ -z ${OPT[soc]:-} || ${OPT[soc]} =~ ^a[23]$ ]] || die "--soc=${OPT[soc]}: expected a2 or a3"
for name in num_processes max_train_steps save_interval per_device_batch_size action_video_freq_ratio; do
    [[ -z ${OPT[$name]:-} || ${OPT[$name]} =~ ^[1-9][0-9]*$ ]] || die "--$name=${OPT[$name]}: expected a positive integer"
done

cd "$REPO"
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
summary=$("$PYTHON" -m DiT4DiT.tools.npu_topology --summary ${OPT[soc]:+--soc="${OPT[soc]}"}) \
    || die "could not read the NPU topology with $PYTHON (set PYTHON to the interpreter of your environment)"
read -r NPU_VISIBLE NPU_TOTAL NPU_SOC <<<"$summary"
HOST=$([[ $NPU_TOTAL -gt 0 ]] && echo npu || echo cpu)

default() { [[ -n ${OPT[$1]:-} ]] || OPT[$1]=$2; }
if [[ $HOST == npu ]]; then
    default num_processes "$NPU_VISIBLE"
    default max_train_steps 100000
    default save_interval $((OPT[max_train_steps] < 10000 ? OPT[max_train_steps] : 10000))
    default per_device_batch_size 4
    default data_mix robotwin
    default data_root_dir ./playground/Datasets/RoboTwin
    default base_model ./playground/Pretrained_models/Cosmos-Predict2.5-2B
    default config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml
    default framework_name DiT4DiT
    default freeze_module_list backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae
    default run_id dit4dit_robotwin
    default launch_config DiT4DiT/config/deepseeds/deepspeed_zero2.yaml
else
    default num_processes 1
    default max_train_steps 100
    default data_root_dir "$TINY_DATA"
    default base_model "$TINY_MODEL"
    default config_yaml DiT4DiT/config/tiny/dit4dit_tiny.yaml
    default run_id dit4dit_tiny
    default launch_config DiT4DiT/config/deepseeds/cpu.yaml
fi
default run_root_dir ./runs
RUN_DIR=${OPT[run_root_dir]}/${OPT[run_id]}
LOG=$RUN_DIR/train.log

PROBLEMS=()
ENV_SET=(WANDB_MODE PYTHONPATH)
export WANDB_MODE=${WANDB_MODE:-offline}

source_cann() {  # a function, so set_env.sh sees no positional arguments (atb's parses them)
    local candidates=("$ASCEND_INSTALL_ROOT/cann/set_env.sh" "$ASCEND_INSTALL_ROOT/ascend-toolkit/set_env.sh") f
    [[ -n ${CANN_SET_ENV:-} ]] && candidates=("$CANN_SET_ENV")
    CANN_FROM=""
    for f in "${candidates[@]}"; do
        if [[ -f $f ]]; then
            set +eu; source "$f"; set -eu  # vendor scripts are not written for strict mode
            CANN_FROM=$f; break
        fi
    done
    if [[ -n $CANN_FROM && -z ${CANN_SET_ENV:-} && -f $ASCEND_INSTALL_ROOT/nnal/atb/set_env.sh ]]; then
        set +eu; source "$ASCEND_INSTALL_ROOT/nnal/atb/set_env.sh"; set -eu
    fi
    if [[ -z $CANN_FROM && -n ${ASCEND_HOME_PATH:-${ASCEND_TOOLKIT_HOME:-}} ]]; then
        CANN_FROM="already sourced (ASCEND_HOME_PATH=${ASCEND_HOME_PATH:-$ASCEND_TOOLKIT_HOME})"
    fi
    [[ -n $CANN_FROM ]] || PROBLEMS+=("CANN not found: no ${candidates[*]}; install CANN 9.0 or set CANN_SET_ENV=/path/to/set_env.sh")
}

package_lib() {  # <package>/lib of $PYTHON's package, found without importing it
    "$PYTHON" - "$1" <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1])
print(os.path.join(spec.submodule_search_locations[0], "lib") if spec and spec.submodule_search_locations else "")
PY
}

if [[ $HOST == npu ]]; then
    source_cann
    export TASK_QUEUE_ENABLE=${TASK_QUEUE_ENABLE:-2}
    export CPU_AFFINITY_CONF=${CPU_AFFINITY_CONF:-1}
    export PYTORCH_NPU_ALLOC_CONF=${PYTORCH_NPU_ALLOC_CONF:-expandable_segments:True}
    export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1200}  # 16 processes starting together
    export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}  # = torch's 30-minute process-group timeout
    ENV_SET+=(TASK_QUEUE_ENABLE CPU_AFFINITY_CONF PYTORCH_NPU_ALLOC_CONF HCCL_CONNECT_TIMEOUT HCCL_EXEC_TIMEOUT)
    if [[ $NPU_SOC == a3 ]]; then
        export TORCH_HCCL_ZERO_COPY=${TORCH_HCCL_ZERO_COPY:-1}
        ENV_SET+=(TORCH_HCCL_ZERO_COPY)
    elif [[ -v TORCH_HCCL_ZERO_COPY ]]; then
        echo "note: unsetting TORCH_HCCL_ZERO_COPY: it is A3-only and fails on A2 (pass --soc=a3 if this is an A3 node)" >&2
        unset TORCH_HCCL_ZERO_COPY
    fi
    torch_lib=$(package_lib torch)
    npu_lib=$(package_lib torch_npu)
    [[ -n $npu_lib ]] || PROBLEMS+=("torch_npu is not installed for $PYTHON: pip install -r requirements-npu.txt")
    for lib in "$npu_lib" "$torch_lib"; do  # libc10.so / libtorch_npu.so for mx_driving and torch_npu extensions
        [[ -n $lib && -d $lib ]] && LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    done
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
    ENV_SET+=(LD_LIBRARY_PATH)

    seen="npu-smi lists $NPU_TOTAL (${NPU_SOC^^})${ASCEND_RT_VISIBLE_DEVICES+, ASCEND_RT_VISIBLE_DEVICES=$ASCEND_RT_VISIBLE_DEVICES}"
    if ((NPU_VISIBLE == 0)); then
        PROBLEMS+=("no NPU device is visible ($seen); fix ASCEND_RT_VISIBLE_DEVICES (ascending IDs below $NPU_TOTAL)")
    elif ((OPT[num_processes] > NPU_VISIBLE)); then
        PROBLEMS+=("--num_processes=${OPT[num_processes]} but only $NPU_VISIBLE NPU devices are visible ($seen); pass --num_processes=$NPU_VISIBLE or fewer (an Atlas 800T A3 node has 16 devices, an A2 node 8)")
    fi
    if [[ ! -f $TRAIN_ENTRY ]]; then
        PROBLEMS+=("trainer $TRAIN_ENTRY not found")
    elif ! grep -qF "$PATCH_MARK" "$TRAIN_ENTRY"; then
        PROBLEMS+=("the NPU patch is not applied ($TRAIN_ENTRY lacks '$PATCH_MARK'): run  git apply patches/dit4dit_npu.patch")
    fi
elif [[ ! -f $TRAIN_ENTRY && $DRY_RUN == 0 ]]; then
    PROBLEMS+=("trainer $TRAIN_ENTRY not found")
fi

[[ -f ${OPT[config_yaml]} ]] || PROBLEMS+=("config ${OPT[config_yaml]} not found (--config_yaml)")
[[ -f ${OPT[launch_config]} ]] || PROBLEMS+=("launch config ${OPT[launch_config]} not found (--launch_config)")
folder_problems() {  # $1 = how to fix, then the folder_checks arguments
    local out fix=$1; shift
    # No torch_npu autoload: resolving mixture names imports torch, and this must work before CANN is found.
    if ! out=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYTHON" -m DiT4DiT.tools.folder_checks "$@" 2>&1); then
        while IFS= read -r line; do PROBLEMS+=("$line"); done <<<"$out"
        PROBLEMS[-1]+=$'\n    fix: '$fix
    fi
}
if [[ ${OPT[base_model]} == "$TINY_MODEL" ]]; then
    fix_model="python -m DiT4DiT.tools.tiny_cosmos --out $TINY_MODEL"
else
    fix_model="huggingface-cli download nvidia/Cosmos-Predict2.5-2B --revision diffusers/base/post-trained --local-dir ${OPT[base_model]}"
fi
if [[ ${OPT[data_root_dir]} == "$TINY_DATA" ]]; then
    fix_data="python -m DiT4DiT.tools.tiny_robotwin --out $TINY_DATA"
else
    fix_data="put the LeRobot datasets of the '${OPT[data_mix]:-configured}' mixture under ${OPT[data_root_dir]}"
fi
folder_problems "$fix_model" base_model "${OPT[base_model]}"
folder_problems "$fix_data" data_root "${OPT[data_root_dir]}" ${OPT[data_mix]:+"${OPT[data_mix]}"}

CMD=("$PYTHON" -m accelerate.commands.launch --config_file "${OPT[launch_config]}" --num_processes "${OPT[num_processes]}"
     "$TRAIN_ENTRY" --config_yaml "${OPT[config_yaml]}")
for name in $(printf '%s\n' "${!KEY[@]}" | sort); do
    [[ -n ${KEY[$name]} && -n ${OPT[$name]:-} ]] && CMD+=("--${KEY[$name]}=${OPT[$name]}")
done
CMD+=("${PASSTHROUGH[@]}")

if ((DRY_RUN)); then
    if [[ $HOST == npu ]]; then
        echo "host: npu (${NPU_SOC^^}, $NPU_VISIBLE of $NPU_TOTAL devices visible); CANN: ${CANN_FROM:-not found}"
    else
        echo "host: cpu (no NPU listed by npu-smi); Ascend environment skipped"
    fi
    echo "environment:"
    for var in "${ENV_SET[@]}"; do echo "  $var=${!var}"; done
    echo "command (in $REPO):"
    echo "  $(printf '%q ' "${CMD[@]}")"
    echo "log: $LOG"
fi
if ((${#PROBLEMS[@]})); then
    echo "preflight: ${#PROBLEMS[@]} problem(s), nothing started:" >&2
    printf '  %s\n' "${PROBLEMS[@]}" >&2
    exit 2
fi
((DRY_RUN)) && { echo "preflight: ok"; exit 0; }

mkdir -p "$RUN_DIR"
echo "=== $(date -Is) $(printf '%q ' "${CMD[@]}")" >>"$LOG"
# pipefail: the status of accelerate launch (non-zero when any rank fails), not tee's.
if "${CMD[@]}" 2>&1 | tee -a "$LOG"; then rc=0; else rc=$?; fi
echo "=== exit code $rc" >>"$LOG"
((rc == 0)) || echo "train_8p.sh: training failed (exit code $rc; each rank's exit code is in the log): $LOG" >&2
exit "$rc"
