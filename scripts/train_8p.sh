#!/usr/bin/env bash
# Launch DiT4DiT training: host detection, Ascend environment, preflight checks, `accelerate launch`, a log.
#
#   bash scripts/train_8p.sh [--option=value ...] [--a.b.c=value ...] [--dry-run]
#
# Only what you type is passed to the trainer; every other value comes from the config YAML, which the host
# kind chooses (npu/cuda: DiT4DiT/config/robotwin/dit4dit_robotwin.yaml, cpu: DiT4DiT/config/tiny/dit4dit_tiny.yaml).
# `--dry-run` lists each value the launcher uses and where it came from (option, yaml, default, host default).
#
# Launcher options (host default):
#   --device=npu|cuda|cpu         override the host detection: npu when `npu-smi info` lists devices; NPU signs
#                                 without it (/dev/davinci*, torch_npu installed) are refused with the fix; cuda
#                                 when a CUDA torch sees devices; else cpu
#   --num_processes=N             processes PER NODE (visible NPUs or GPUs; cpu: 1). A3 node: 16, A2 node: 8
#   --config_yaml=FILE            trainer config (by host kind, above)
#   --launch_config=FILE          accelerate config (npu/cuda: DiT4DiT/config/deepseeds/deepspeed_zero2.yaml, cpu: cpu.yaml)
#   --soc=a2|a3                   override the A2/A3 detection (also DIT4DIT_SOC); A3 gets TORCH_HCCL_ZERO_COPY=1
#   --num_machines=N              nodes in the job (else NNODES, SLURM_NNODES; 1)
#   --machine_rank=R              this node's rank, 0 = the node of the main process (else NODE_RANK, SLURM_NODEID; 0)
#   --main_process_ip=IP          address of machine 0, needed with 2+ nodes (else MASTER_ADDR)
#   --main_process_port=P         its port (else MASTER_PORT; 29500)
#   --net_if=NAME                 network interface for collectives (else DIT4DIT_NET_IF): GLOO_SOCKET_IFNAME, and on
#                                 NPU hosts HCCL_SOCKET_IFNAME and HCCL_IF_IP (its IPv4 address)
# Short names for trainer keys (passed only when given):
#   --max_train_steps=N           trainer.max_train_steps
#   --save_interval=N             trainer.save_interval
#   --per_device_batch_size=N     datasets.vla_data.per_device_batch_size
#   --data_mix=NAME|PATH          datasets.vla_data.data_mix: a mixture name, a dataset folder, a folder of them or
#                                 a mixture file (.yaml)
#   --data_config=NAME            datasets.vla_data.data_config (data config of datasets given by path, or auto)
#   --data_root_dir=DIR           datasets.vla_data.data_root_dir
#   --base_model=DIR              framework.cosmos25.base_model
#   --framework_name=NAME         framework.name
#   --freeze_module_list=A,B      trainer.freeze_modules
#   --action_video_freq_ratio=N   datasets.vla_data.action_video_freq_ratio
#   --run_root_dir=DIR            run_root_dir; the run dir <run_root_dir>/<run_id> must be shared by all nodes;
#                                 the log is train.log there (train.node<R>.log on machine R > 0)
#   --run_id=NAME                 run_id (always passed as a string, so --run_id=20250101 works)
#   --a.b.c=value | --a.b.c value any other trainer key, e.g. --trainer.save_interval=1000; top-level keys too (--seed=1)
#   --dry-run                     print host, values, environment, command and preflight result; start nothing
#   --help                        this text
# Options also accept "--name value". Relative paths (options and path keys such as --datasets.vla_data.cache_dir)
# are relative to your working directory; paths inside the YAML are relative to the repository root, where
# the launch runs.
#
# Environment knobs: PYTHON (interpreter with the stack, 3.10 or 3.11; default: python on PATH),
# DIT4DIT_TRAIN_ENTRY (script to launch instead of DiT4DiT/training/train.py), ASCEND_INSTALL_ROOT
# (/usr/local/Ascend), CANN_SET_ENV (an explicit set_env.sh), and any variable below, which keeps your value.
# NPU host: sources CANN's set_env.sh (<root>/cann or <root>/ascend-toolkit, then <root>/nnal/atb), sets
# TASK_QUEUE_ENABLE=2, CPU_AFFINITY_CONF=1, PYTORCH_NPU_ALLOC_CONF=expandable_segments:True,
# TORCH_HCCL_ZERO_COPY=1 (A3 only; removed on A2), HCCL_CONNECT_TIMEOUT=1200, HCCL_EXEC_TIMEOUT=1800, and puts
# torch/lib and torch_npu/lib of $PYTHON first on LD_LIBRARY_PATH. Any host: WANDB_MODE=offline, PYTHONPATH.
# Preflight (before anything starts): Python >= 3.10, num_processes <= this node's devices, CANN found,
# torch_npu installed, the NPU patch applied, the config loads, base model and data root complete.
# SIGTERM / SIGINT to the launcher go to the whole training process group; the launcher waits for it.
# Exit status: 2 for usage and preflight problems, else that of accelerate launch (non-zero if any rank fails).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3 || echo python)}
TRAIN_ENTRY=${DIT4DIT_TRAIN_ENTRY:-DiT4DiT/training/train.py}
ASCEND_INSTALL_ROOT=${ASCEND_INSTALL_ROOT:-/usr/local/Ascend}
PATCH_MARK="from torch_npu.contrib import transfer_to_npu"
TINY_MODEL=playground/Pretrained_models/Cosmos-Predict2.5-tiny
TINY_DATA=playground/Datasets/robotwin_tiny

die() { echo "train_8p.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# Launcher option -> trainer config key ("" = launcher-only option).
declare -A KEY=(
    [num_processes]="" [config_yaml]="" [launch_config]="" [soc]="" [device]="" [net_if]=""
    [num_machines]="" [machine_rank]="" [main_process_ip]="" [main_process_port]=""
    [max_train_steps]=trainer.max_train_steps [save_interval]=trainer.save_interval [per_device_batch_size]=datasets.vla_data.per_device_batch_size
    [data_mix]=datasets.vla_data.data_mix [data_root_dir]=datasets.vla_data.data_root_dir
    [data_config]=datasets.vla_data.data_config
    [base_model]=framework.cosmos25.base_model [framework_name]=framework.name
    [freeze_module_list]=trainer.freeze_modules [action_video_freq_ratio]=datasets.vla_data.action_video_freq_ratio
    [run_root_dir]=run_root_dir [run_id]=run_id
)
# Values that name files or folders: a relative one is made absolute against the caller's directory.
declare -A IS_PATH=([config_yaml]=1 [launch_config]=1 [base_model]=1 [data_root_dir]=1 [run_root_dir]=1
                    [datasets.vla_data.cache_dir]=1)
declare -A OPTION_OF_KEY=()
for name in "${!KEY[@]}"; do [[ -n ${KEY[$name]} ]] && OPTION_OF_KEY[${KEY[$name]}]=$name; done
declare -A OPT=() SRC=()
FORWARD=()  # what the user typed for the trainer, in order, as --key=value
DRY_RUN=0

while (($#)); do
    arg=$1; shift
    case $arg in
        -h|--help) usage; exit 0 ;;
        --dry-run|--dry_run) DRY_RUN=1; continue ;;
        --*=*) name=${arg%%=*}; name=${name#--}; value=${arg#*=}; valueless=0 ;;
        --?*) name=${arg#--}
              if (($#)) && [[ $1 != --* ]]; then value=$1; valueless=0; shift; else value=true; valueless=1; fi ;;
        *) die "unexpected argument '$arg'; options look like --name=value (see --help)" ;;
    esac
    [[ -n ${OPTION_OF_KEY[$name]:-} ]] && name=${OPTION_OF_KEY[$name]}
    if [[ -v KEY[$name] ]] && { ((valueless)) || [[ -z $value ]]; }; then
        die "--$name needs a value: --$name=VALUE (see --help)"
    fi
    if [[ -n ${IS_PATH[$name]:-} && $value != /* ]] || [[ $name == data_mix && $value == */* && $value != /* ]]; then
        value=$PWD/$value
    fi
    if [[ $name == run_id ]]; then
        [[ $value =~ ^[A-Za-z0-9._+=@,-]+$ && $value != . && $value != .. ]] \
            || die "--run_id=$value: use letters, digits and . _ - + = @ , only (it names the folder <run_root_dir>/<run_id>)"
        value="'$value'"  # quoted, so the trainer's YAML parsing keeps 20250101 a string
    fi
    if [[ -v KEY[$name] ]]; then
        OPT[$name]=$value; SRC[$name]="option --$name"
        [[ -n ${KEY[$name]} ]] && FORWARD+=("--${KEY[$name]}=$value")
    else  # any other trainer key, dotted or top-level; the config check below names unknown ones
        FORWARD+=("--$name=$value")
    fi
done
[[ -z ${OPT[soc]:-} || ${OPT[soc]} =~ ^a[23]$ ]] || die "--soc=${OPT[soc]}: expected a2 or a3"
[[ -z ${OPT[device]:-} || ${OPT[device]} =~ ^(npu|cuda|cpu)$ ]] || die "--device=${OPT[device]}: expected npu, cuda or cpu"
for name in num_processes max_train_steps save_interval per_device_batch_size action_video_freq_ratio; do
    [[ -z ${OPT[$name]:-} || ${OPT[$name]} =~ ^[1-9][0-9]*$ ]] || die "--$name=${OPT[$name]}: expected a positive integer"
done

declare -A NODE=()
first_set() {  # NODE[option] and SRC[option]: the option, else the first variable that is set, else the fallback
    local option=$1 fallback=$2 var; shift 2
    if [[ -n ${OPT[$option]:-} ]]; then NODE[$option]=${OPT[$option]}; return; fi
    for var; do [[ -n ${!var:-} ]] && { NODE[$option]=${!var}; SRC[$option]=$var; return; }; done
    NODE[$option]=$fallback; SRC[$option]=default
}
first_set num_machines 1 NNODES SLURM_NNODES
first_set machine_rank 0 NODE_RANK SLURM_NODEID
first_set main_process_ip "" MASTER_ADDR
first_set main_process_port 29500 MASTER_PORT
first_set net_if "" DIT4DIT_NET_IF
NUM_MACHINES=${NODE[num_machines]} MACHINE_RANK=${NODE[machine_rank]} MAIN_IP=${NODE[main_process_ip]}
MAIN_PORT=${NODE[main_process_port]} NET_IF=${NODE[net_if]}
[[ $NUM_MACHINES =~ ^[1-9][0-9]*$ ]] || die "num_machines=$NUM_MACHINES (${SRC[num_machines]}): expected a positive integer"
[[ $MACHINE_RANK =~ ^[0-9]+$ ]] && ((MACHINE_RANK < NUM_MACHINES)) \
    || die "machine_rank=$MACHINE_RANK (${SRC[machine_rank]}): expected 0 to $((NUM_MACHINES - 1)) for $NUM_MACHINES machine(s)"
[[ $MAIN_PORT =~ ^[1-9][0-9]*$ ]] && ((MAIN_PORT <= 65535)) || die "main_process_port=$MAIN_PORT (${SRC[main_process_port]}): expected 1-65535"
((NUM_MACHINES == 1)) || [[ -n $MAIN_IP ]] \
    || die "$NUM_MACHINES machines need the address of machine 0: --main_process_ip=IP (or MASTER_ADDR)"

cd "$REPO"
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
host_line=$("$PYTHON" -m DiT4DiT.tools.host_kind ${OPT[device]:+--device="${OPT[device]}"} ${OPT[soc]:+--soc="${OPT[soc]}"}) \
    || die "could not tell the host kind with $PYTHON (see above; PYTHON=/path/to/python3.10 picks the interpreter)"
IFS=$'\t' read -r HOST DEV_VISIBLE DEV_TOTAL NPU_SOC PY_VERSION HOST_REASON HOST_PROBLEM <<<"$host_line"

PROBLEMS=()
[[ -z $HOST_PROBLEM ]] || PROBLEMS+=("$HOST_PROBLEM")
host_default() {  # $1 option, $2 value: the host kind's default when the option was not given
    [[ -n ${OPT[$1]:-} ]] && return
    OPT[$1]=$2; SRC[$1]="host default: $HOST"
}
if [[ $HOST == cpu ]]; then
    host_default config_yaml DiT4DiT/config/tiny/dit4dit_tiny.yaml
    host_default launch_config DiT4DiT/config/deepseeds/cpu.yaml
    host_default num_processes 1
else
    host_default config_yaml DiT4DiT/config/robotwin/dit4dit_robotwin.yaml
    host_default launch_config DiT4DiT/config/deepseeds/deepspeed_zero2.yaml
    host_default num_processes "$((DEV_VISIBLE > 0 ? DEV_VISIBLE : 1))"
fi
TOTAL_PROCESSES=$((OPT[num_processes] * NUM_MACHINES))

[[ -f ${OPT[config_yaml]} ]] || die "config ${OPT[config_yaml]} not found (${SRC[config_yaml]})"
[[ -f ${OPT[launch_config]} ]] || PROBLEMS+=("launch config ${OPT[launch_config]} not found (${SRC[launch_config]})")
SHOW=(run_root_dir run_id framework.cosmos25.base_model datasets.vla_data.data_root_dir datasets.vla_data.data_mix)
# The config as the trainer will load it (no torch_npu autoload: this runs before CANN is found).
plan=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYTHON" -m DiT4DiT.tools.launch_plan --config_yaml "${OPT[config_yaml]}" \
       --options "$(IFS=,; echo "${!KEY[*]}")" --show "${SHOW[@]}" -- "${FORWARD[@]}") \
    || die "the config does not load with these options (the reason is above); nothing started"
declare -A VAL=() VSRC=()
PLAN_KEYS=()
while IFS=$'\t' read -r key source value; do
    VAL[$key]=$value; VSRC[$key]=$source; PLAN_KEYS+=("$key")
done <<<"$plan"
RUN_DIR=${VAL[run_root_dir]}/${VAL[run_id]}
LOG=$RUN_DIR/train.log
((MACHINE_RANK == 0)) || LOG=$RUN_DIR/train.node$MACHINE_RANK.log  # the run dir is shared: one log per node

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

if [[ $HOST == npu && -z $HOST_PROBLEM ]]; then
    source_cann
    export TASK_QUEUE_ENABLE=${TASK_QUEUE_ENABLE:-2}
    export CPU_AFFINITY_CONF=${CPU_AFFINITY_CONF:-1}
    export PYTORCH_NPU_ALLOC_CONF=${PYTORCH_NPU_ALLOC_CONF:-expandable_segments:True}
    export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1200}  # 16 processes per node starting together
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
    if [[ ! -f $TRAIN_ENTRY ]]; then
        PROBLEMS+=("trainer $TRAIN_ENTRY not found")
    elif ! grep -qF "$PATCH_MARK" "$TRAIN_ENTRY"; then
        PROBLEMS+=("the NPU patch is not applied ($TRAIN_ENTRY lacks '$PATCH_MARK'): run  git apply patches/dit4dit_npu.patch")
    fi
    case ${DIT4DIT_MX_PATCHER:-lean} in lean|default|off) ;;
        *) PROBLEMS+=("DIT4DIT_MX_PATCHER=$DIT4DIT_MX_PATCHER: expected lean, default or off") ;;
    esac
elif [[ ! -f $TRAIN_ENTRY && $DRY_RUN == 0 ]]; then
    PROBLEMS+=("trainer $TRAIN_ENTRY not found")
fi

# Per node: this node's processes against this node's devices.
if [[ $HOST != cpu && -z $HOST_PROBLEM ]]; then
    if [[ $HOST == npu ]]; then
        seen="npu-smi lists $DEV_TOTAL (${NPU_SOC^^})${ASCEND_RT_VISIBLE_DEVICES+, ASCEND_RT_VISIBLE_DEVICES=$ASCEND_RT_VISIBLE_DEVICES}"
        fix="ascending IDs below $DEV_TOTAL in ASCEND_RT_VISIBLE_DEVICES"; sizes=" (an Atlas 800T A3 node has 16 devices, an A2 node 8)"
    else
        seen="torch sees $DEV_TOTAL${CUDA_VISIBLE_DEVICES+, CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES}"; fix="CUDA_VISIBLE_DEVICES"; sizes=""
    fi
    if ((DEV_VISIBLE == 0)); then
        PROBLEMS+=("no ${HOST^^} device is visible ($seen); fix $fix")
    elif ((OPT[num_processes] > DEV_VISIBLE)); then
        PROBLEMS+=("--num_processes=${OPT[num_processes]} per node but only $DEV_VISIBLE ${HOST^^} devices are visible on this node ($seen); pass --num_processes=$DEV_VISIBLE or fewer$sizes")
    fi
fi

if [[ -n $NET_IF ]]; then
    if [[ ! -e /sys/class/net/$NET_IF ]]; then
        PROBLEMS+=("network interface $NET_IF (${SRC[net_if]}) does not exist here; interfaces: $(ls /sys/class/net 2>/dev/null | tr '\n' ' ')")
    else
        export GLOO_SOCKET_IFNAME=$NET_IF
        ENV_SET+=(GLOO_SOCKET_IFNAME)
        if [[ $HOST == npu ]]; then
            if_ip=$(ip -4 -o addr show dev "$NET_IF" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
            if [[ -z $if_ip ]]; then
                PROBLEMS+=("network interface $NET_IF has no IPv4 address (HCCL_IF_IP needs one); pick another --net_if")
            else
                export HCCL_SOCKET_IFNAME=$NET_IF HCCL_IF_IP=$if_ip
                ENV_SET+=(HCCL_SOCKET_IFNAME HCCL_IF_IP)
            fi
        fi
    fi
fi
for var in GLOO_SOCKET_IFNAME HCCL_SOCKET_IFNAME HCCL_IF_IP; do  # yours, when no --net_if: kept and shown
    [[ -v $var && " ${ENV_SET[*]} " != *" $var "* ]] && ENV_SET+=("$var")
done

folder_problems() {  # $1 = how to fix, then the folder_checks arguments
    local out fix=$1; shift
    # No torch_npu autoload: resolving mixture names imports torch, and this must work before CANN is found.
    if ! out=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYTHON" -m DiT4DiT.tools.folder_checks "$@" 2>&1); then
        while IFS= read -r line; do PROBLEMS+=("$line"); done <<<"$out"
        PROBLEMS[-1]+=$'\n    fix: '$fix
    fi
}
BASE_MODEL=${VAL[framework.cosmos25.base_model]}
DATA_ROOT=${VAL[datasets.vla_data.data_root_dir]}
DATA_MIX=${VAL[datasets.vla_data.data_mix]}
# The folder check counts a mixture's datasets only when you name it; the trainer rules on the YAML's own.
CHECKED_MIX=""
[[ ${VSRC[datasets.vla_data.data_mix]} == option ]] && CHECKED_MIX=$DATA_MIX
same_path() { [[ $(realpath -m "$1") == $(realpath -m "$2") ]]; }
if [[ -z $BASE_MODEL ]]; then
    PROBLEMS+=("framework.cosmos25.base_model is not set: pass --base_model=DIR")
else
    if same_path "$BASE_MODEL" "$TINY_MODEL"; then
        fix_model="python -m DiT4DiT.tools.tiny_cosmos --out $TINY_MODEL"
    else
        fix_model="huggingface-cli download nvidia/Cosmos-Predict2.5-2B --revision diffusers/base/post-trained --local-dir $BASE_MODEL"
    fi
    folder_problems "$fix_model" base_model "$BASE_MODEL"
fi
if [[ $DATA_MIX == */* || $DATA_MIX == *.yaml || $DATA_MIX == *.yml ]]; then
    folder_problems "give a LeRobot dataset folder, a folder of them or a mixture file" data_mix "$DATA_MIX"
elif [[ -z $DATA_ROOT ]]; then
    PROBLEMS+=("datasets.vla_data.data_root_dir is not set: pass --data_root_dir=DIR")
else
    if same_path "$DATA_ROOT" "$TINY_DATA"; then
        fix_data="python -m DiT4DiT.tools.tiny_robotwin --out $TINY_DATA"
    else
        fix_data="put the LeRobot datasets of the '${DATA_MIX:-configured}' mixture under $DATA_ROOT"
    fi
    folder_problems "$fix_data" data_root "$DATA_ROOT" ${CHECKED_MIX:+"$CHECKED_MIX"}
fi

CMD=("$PYTHON" -m accelerate.commands.launch --config_file "${OPT[launch_config]}" --num_processes "$TOTAL_PROCESSES")
if ((NUM_MACHINES > 1)); then
    CMD+=(--num_machines "$NUM_MACHINES" --machine_rank "$MACHINE_RANK" --main_process_ip "$MAIN_IP" --main_process_port "$MAIN_PORT")
fi
CMD+=("$TRAIN_ENTRY" --config_yaml "${OPT[config_yaml]}" "${FORWARD[@]}")

if ((DRY_RUN)); then
    echo "python: $PY_VERSION ($PYTHON)"
    if [[ $HOST == npu ]]; then
        echo "host: npu (${NPU_SOC^^}, $DEV_VISIBLE of $DEV_TOTAL devices visible); CANN: ${CANN_FROM:-not found}"
    elif [[ $HOST == cuda ]]; then
        echo "host: cuda ($DEV_VISIBLE of $DEV_TOTAL devices visible); Ascend environment skipped"
    else
        echo "host: cpu; Ascend environment skipped"
    fi
    echo "detected: $HOST_REASON"
    echo "nodes: $NUM_MACHINES (this is machine $MACHINE_RANK), ${OPT[num_processes]} process(es) per node, $TOTAL_PROCESSES in all"
    echo "values:"
    for name in device config_yaml launch_config num_processes soc; do
        [[ -n ${OPT[$name]:-} ]] && echo "  $name=${OPT[$name]}  (${SRC[$name]})"
    done
    for name in num_machines machine_rank main_process_ip main_process_port net_if; do
        [[ -n ${NODE[$name]} ]] && echo "  $name=${NODE[$name]}  (${SRC[$name]})"
    done
    for key in "${PLAN_KEYS[@]}"; do
        source=${VSRC[$key]}
        [[ $source == option ]] && source="option --${OPTION_OF_KEY[$key]:-$key}"
        [[ $source == yaml ]] && source="yaml ${OPT[config_yaml]}"
        echo "  $key=${VAL[$key]}  ($source)"
    done
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
# The trainer runs in a session of its own, so a signal reaches all of its processes (accelerate, torchrun's
# agent, every rank) and none is orphaned; tee ignores SIGINT/SIGTERM to log the trainer's last words.
fifo=$(mktemp -u "${TMPDIR:-/tmp}/dit4dit-log.XXXXXX")
mkfifo "$fifo"
(trap '' INT TERM; exec tee -a "$LOG") <"$fifo" &
TEE_PID=$!
setsid "${CMD[@]}" >"$fifo" 2>&1 &
TRAIN_PID=$!
SIGNALLED=""
forward() { SIGNALLED=$1; kill -s "$1" -- "-$TRAIN_PID" 2>/dev/null || true; }
trap 'forward TERM' TERM
trap 'forward INT' INT
while :; do  # a trapped signal interrupts wait; the trainer is waited for until it has really ended
    if wait "$TRAIN_PID"; then rc=0; else rc=$?; fi
    kill -0 "$TRAIN_PID" 2>/dev/null || break
done
while kill -0 -- "-$TRAIN_PID" 2>/dev/null; do sleep 1; done  # ranks that outlive accelerate (still saving)
wait "$TEE_PID" || true
rm -f "$fifo"
echo "=== exit code $rc${SIGNALLED:+ (after SIG$SIGNALLED, forwarded to the training process group)}" >>"$LOG"
((rc == 0)) || echo "train_8p.sh: training failed (exit code $rc; each rank's exit code is in the log): $LOG" >&2
exit "$rc"
