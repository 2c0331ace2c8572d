"""The environment a training launch gets, one Setting per variable, each with where its value comes from.

The Ascend block (NPU hosts; the values DrivingSDK's A3 recipes use, ASCEND_NOTES §4):
  TASK_QUEUE_ENABLE=2                          two-stage dispatch, level 2
  CPU_AFFINITY_CONF=1                          bind each process to its NPU's cores
  PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
  HCCL_CONNECT_TIMEOUT=1200                    16 processes per node set up links together
  HCCL_EXEC_TIMEOUT=<90% of the process-group timeout>  so that HCCL reports a hung collective first
  TORCH_HCCL_ZERO_COPY                         unset (off): a trial feature, not for production; A3 only, when
                                               asked for (--hccl_zero_copy=1, or yours); unset on A2
  HCCL_DETERMINISTIC=true                      with trainer.deterministic (CUDA: CUBLAS_WORKSPACE_CONFIG=:4096:8)
  HCCL_SOCKET_IFNAME==<if>, HCCL_IF_IP=<its IPv4>  exact match ("=eth0"; "eth0" also matches eth0.100)
  LD_LIBRARY_PATH=<torch/lib>:<torch_npu/lib>:...  for mx_driving's and torch_npu's extensions
  OMP_NUM_THREADS=1, COMBINED_ENABLE=1, ACLNN_CACHE_LIMIT=100000   what MindSpeed-MM's A3 DiT recipes set
                                               (ASCEND_NOTES §12); bench/device_check.py's env_ab row times each
Any host: WANDB_MODE=offline, TORCH_WARM_POOL=0, GLOO_SOCKET_IFNAME=<if>; CPU hosts: OMP_NUM_THREADS=cores/processes.
A variable you exported keeps your value (and the dry run says "yours").
"""

from __future__ import annotations

from dataclasses import dataclass

ASCEND_DEFAULTS = {
    "TASK_QUEUE_ENABLE": "2",
    "CPU_AFFINITY_CONF": "1",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "HCCL_CONNECT_TIMEOUT": "1200",
}
# MindSpeed-MM's A3 DiT recipes (examples/wan2.1/14b/t2v_A3/pretrain.sh L8-13, L67-73), the variables safe for any
# run: one OpenMP thread per process (16 processes share the node's cores; the host does little math), the
# combination of non-contiguous operators into one (COMBINED_ENABLE, Ascend/pytorch's environment variable
# reference), a larger aclnn operator cache. The recipes' gc.set_threshold(700, 50, 1000) is Python code, not a
# variable, and is not set.
MINDSPEED_A3 = {"OMP_NUM_THREADS": "1", "COMBINED_ENABLE": "1", "ACLNN_CACHE_LIMIT": "100000"}
MINDSPEED_A3_SOURCE = "MindSpeed-MM A3 recipe (examples/wan2.1/14b/t2v_A3/pretrain.sh)"
HCCL_SHARE_OF_COLLECTIVE_TIMEOUT = 0.9


@dataclass(frozen=True)
class Setting:
    name: str
    value: str | None  # None: unset it
    source: str
    prepend: bool = False  # value goes in front of the variable as CANN's set_env.sh leaves it
    exported: bool = True  # False: the script exported it before the plan was made (shown only)

    def shown(self) -> str:
        if self.value is None:
            return f"unset {self.name}  ({self.source})"
        value = f"{self.value}:${self.name}" if self.prepend else self.value
        return f"{self.name}={value}  ({self.source})"


class Environment:
    """Settings in the order they were decided; the user's own value wins unless `force`."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.settings: dict[str, Setting] = {}

    def default(self, name: str, value: str, source: str) -> None:
        if name in self.env:
            self.settings[name] = Setting(name, self.env[name], "yours")
        else:
            self.settings[name] = Setting(name, value, source)

    def keep_yours(self, name: str) -> None:
        if name in self.env:
            self.settings[name] = Setting(name, self.env[name], "yours")

    def force(self, name: str, value: str | None, source: str, prepend: bool = False, exported: bool = True) -> None:
        self.settings[name] = Setting(name, value, source, prepend, exported)

    def value(self, name: str) -> str | None:
        setting = self.settings.get(name)
        return setting.value if setting else None


def hccl_exec_timeout(collective_timeout_s: int) -> int:
    """HCCL's execution timeout below the process group's, so the HCCL error (naming the op) comes first."""
    return max(1, int(collective_timeout_s * HCCL_SHARE_OF_COLLECTIVE_TIMEOUT))


def omp_threads(cores: int, processes: int) -> int:
    """Threads per CPU process so that the node's processes together use each core once."""
    return max(1, cores // max(processes, 1))
