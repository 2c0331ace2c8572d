"""launch/environment.py: the launch's environment, one Setting per variable with its source; yours wins unless
forced."""

from __future__ import annotations

from DiT4DiT.launch.environment import Environment, Setting, hccl_exec_timeout, omp_threads


def test_your_value_wins_over_a_default_and_a_force_wins_over_yours():
    env = Environment({"TASK_QUEUE_ENABLE": "1", "WANDB_MODE": "online"})
    env.default("TASK_QUEUE_ENABLE", "2", "Ascend default")
    env.default("CPU_AFFINITY_CONF", "1", "Ascend default")
    env.force("WANDB_MODE", "offline", "launcher")
    env.keep_yours("HCCL_IF_IP")  # not yours: nothing
    assert env.settings["TASK_QUEUE_ENABLE"] == Setting("TASK_QUEUE_ENABLE", "1", "yours")
    assert env.value("CPU_AFFINITY_CONF") == "1" and env.value("WANDB_MODE") == "offline"
    assert env.value("HCCL_IF_IP") is None


def test_a_setting_shows_how_it_is_applied():
    assert Setting("A", "1", "yours").shown() == "A=1  (yours)"
    assert Setting("LD_LIBRARY_PATH", "/t/lib", "torch", prepend=True).shown() == "LD_LIBRARY_PATH=/t/lib:$LD_LIBRARY_PATH  (torch)"
    assert Setting("TORCH_HCCL_ZERO_COPY", None, "A2").shown() == "unset TORCH_HCCL_ZERO_COPY  (A2)"


def test_hccl_times_out_before_the_process_group_and_threads_share_the_cores():
    assert hccl_exec_timeout(1800) == 1620 and hccl_exec_timeout(1) == 1
    assert omp_threads(16, 4) == 4 and omp_threads(2, 8) == 1 and omp_threads(8, 0) == 8
