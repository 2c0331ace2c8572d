"""The launcher's plan, in-process: made-up machines (host kind, routes, interfaces, cores) through the real
options parser, the real config loader and the real preflight checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.config.schema import ConfigError
from DiT4DiT.launch import options, plan as planning, run
from DiT4DiT.launch.host_kind import Host
from DiT4DiT.launch.preflight import PATCH_MARK

A3 = Host("npu", 16, 16, "a3", "npu-smi lists 16 devices (A3, detected)")
A2 = Host("npu", 8, 8, "a2", "npu-smi lists 8 devices (A2, detected)")
CPU = Host("cpu", 0, 0, "none", "no npu-smi device")


@pytest.fixture
def ascend(tmp_path) -> dict[str, str]:
    """An environment in which CANN and the patched trainer are found."""
    set_env = tmp_path / "cann" / "set_env.sh"
    set_env.parent.mkdir()
    set_env.write_text("export ASCEND_HOME_PATH=/x\n")
    entry = tmp_path / "train.py"
    entry.write_text(f"{PATCH_MARK}\n")
    return {"CANN_SET_ENV": str(set_env), "DIT4DIT_TRAIN_ENTRY": str(entry)}


def make(argv: list[str], host: Host, env: dict[str, str] | None = None, route=("eth7", ""), cores: int = 16,
         cwd: Path = Path("/caller"), torch_npu: bool = True, libs: dict | None = None) -> planning.Plan:
    libs = libs or {"torch": "/py/torch/lib", "torch_npu": "/py/torch_npu/lib" if torch_npu else None}
    facts = planning.Facts(env=dict(env or {}), detect=lambda device, soc: host, route_interface=lambda ip: route,
                           interfaces=lambda: ["eth7", "lo"], ipv4_address=lambda name: "10.0.0.5",
                           package_lib=libs.get, cores=cores, python="/py/bin/python", python_version=(3, 10, 14))
    return planning.build(options.parse(argv, cwd), facts)


def env_of(plan: planning.Plan) -> dict[str, str | None]:
    return {name: s.value for name, s in plan.env.settings.items()}


def test_cpu_host_gets_the_tiny_defaults_and_threads_per_process():
    plan = make(["--num_processes=2"], CPU, cores=16)
    assert plan.shown["config_yaml"] == ("DiT4DiT/config/tiny/dit4dit_tiny.yaml", "host default: cpu")
    assert plan.shown["launch_config"] == ("DiT4DiT/config/deepseeds/cpu.yaml", "host default: cpu")
    assert env_of(plan)["OMP_NUM_THREADS"] == "8"
    assert plan.env.settings["OMP_NUM_THREADS"].source == "16 cores / 2 process(es) per node"
    assert "TASK_QUEUE_ENABLE" not in env_of(plan) and plan.timeouts == ""
    assert plan.command[:7] == ["/py/bin/python", "-m", "accelerate.commands.launch", "--config_file",
                                "DiT4DiT/config/deepseeds/cpu.yaml", "--num_processes", "2"]
    yours = make([], CPU, env={"OMP_NUM_THREADS": "3"}, cores=16)
    assert env_of(yours)["OMP_NUM_THREADS"] == "3" and yours.env.settings["OMP_NUM_THREADS"].source == "yours"
    assert env_of(make(["--num_processes=4"], CPU, cores=2))["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize("host", [CPU, A3])
def test_no_host_warms_inductors_compile_workers(host, ascend):
    # deepspeed's import would start them in the launcher and in every rank; nothing in training compiles
    assert env_of(make([], host, env=ascend))["TORCH_WARM_POOL"] == "0"
    assert env_of(make([], host, env={**ascend, "TORCH_WARM_POOL": "1"}))["TORCH_WARM_POOL"] == "1"


def test_values_say_where_they_come_from():
    plan = make(["--max_train_steps=7", "--seed=3", "--data_mix=robotwin_task1"], CPU)
    config = plan.config
    assert (config["trainer.max_train_steps"].value, config["trainer.max_train_steps"].source) == ("7", "option")
    assert (config["seed"].value, config["seed"].source) == ("3", "option")
    assert (config["run_id"].value, config["run_id"].source) == ("dit4dit_tiny", "yaml")
    assert config["trainer.collective_timeout_s"].value == "600"
    assert plan.forwarded == ["--trainer.max_train_steps=7", "--datasets.vla_data.data_mix=robotwin_task1", "--seed=3"]
    text = planning.dry_run(plan)
    assert "  trainer.max_train_steps=7  (option --max_train_steps)" in text
    assert "  run_id=dit4dit_tiny  (yaml DiT4DiT/config/tiny/dit4dit_tiny.yaml)" in text
    assert "  num_processes=1  (host default: cpu)" in text


def test_data_config_is_forwarded_next_to_data_mix():
    parsed = options.parse(["--data_config=robotwin", "--data_mix=/data/my_set"], Path("/caller"))
    assert parsed.forwarded == ["--datasets.vla_data.data_mix=/data/my_set", "--datasets.vla_data.data_config=robotwin"]


@pytest.mark.parametrize("argv, message", [
    (["--max_train_steps=0"], "--max_train_steps=0: expected a positive integer"),
    (["--run_id"], "--run_id needs a value: --run_id=VALUE"),
    (["--run_id=a/b"], "--run_id=a/b: use letters, digits"),
    (["--soc=a5"], "--soc=a5: expected a2 or a3"),
    (["--max_train_steps=2", "--trainer.max_train_steps=3"], "trainer.max_train_steps is given twice"),
    (["stray"], "unexpected argument 'stray'"),
])
def test_bad_options_are_usage_errors(argv, message):
    with pytest.raises(options.UsageError, match=message.replace("?", r"\?")) as raised:
        make(argv, CPU)
    assert raised.value.exit_code == 2


def test_a_bad_soc_in_the_environment_is_refused_on_any_host(monkeypatch):
    monkeypatch.setenv("DIT4DIT_SOC", "a9")  # read where npu-smi lists devices, and now on a CPU host too
    with pytest.raises(options.UsageError, match="DIT4DIT_SOC='a9': expected one of a2, a3") as raised:
        make([], CPU)
    assert raised.value.exit_code == 2


def test_unknown_names_get_the_closest_option():
    with pytest.raises(ConfigError, match=r"unknown option --num_proceses; did you mean --num_processes\?"):
        make(["--num_proceses=2"], CPU)


def test_a_data_config_the_registry_lacks_is_refused_before_planning():
    with pytest.raises(ConfigError, match=r"datasets\.vla_data\.data_config='robotwn' is not a data config"):
        make(["--data_config=robotwn"], CPU)


def test_paths_are_the_callers_and_run_id_stays_a_string(tmp_path):
    plan = make(["--base_model=m", "--run_root_dir=/abs", "--datasets.vla_data.cache_dir", "c", "--run_id=20250101"],
                CPU, cwd=tmp_path)
    assert plan.forwarded == [f"--framework.cosmos25.base_model={tmp_path}/m", "--run_root_dir=/abs", "--run_id='20250101'",
                              f"--datasets.vla_data.cache_dir={tmp_path}/c"]
    assert plan.log == "/abs/20250101/train.log"


@pytest.mark.parametrize("host, devices, zero_copy", [(A3, 16, None), (A2, 8, None)])
def test_one_npu_node_gets_the_ascend_environment(host, devices, zero_copy, ascend):
    plan = make([], host, env=ascend)
    env = env_of(plan)
    assert (env["TASK_QUEUE_ENABLE"], env["CPU_AFFINITY_CONF"], env["HCCL_CONNECT_TIMEOUT"]) == ("2", "1", "1200")
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert env.get("TORCH_HCCL_ZERO_COPY") == zero_copy
    assert plan.shown["num_processes"] == (str(devices), "host default: npu")
    assert plan.cann_scripts == [ascend["CANN_SET_ENV"]] and plan.cann == ascend["CANN_SET_ENV"]
    assert not [p for p in plan.problems if "CANN" in p or "patch" in p or "torch_npu" in p]


def test_an_npu_node_gets_mindspeeds_a3_variables_with_their_source_and_yours_win(ascend):
    """OMP_NUM_THREADS=1, COMBINED_ENABLE=1, ACLNN_CACHE_LIMIT=100000 as MindSpeed-MM's A3 recipes set them, each
    naming that recipe in the dry run's reason column; an exported value stays."""
    plan = make([], A3, env=ascend)
    settings = plan.env.settings
    assert {name: settings[name].value for name in ("OMP_NUM_THREADS", "COMBINED_ENABLE", "ACLNN_CACHE_LIMIT")} == {
        "OMP_NUM_THREADS": "1", "COMBINED_ENABLE": "1", "ACLNN_CACHE_LIMIT": "100000"}
    assert settings["COMBINED_ENABLE"].shown() == ("COMBINED_ENABLE=1  (MindSpeed-MM A3 recipe "
                                                   "(examples/wan2.1/14b/t2v_A3/pretrain.sh))")
    yours = make([], A3, env={**ascend, "OMP_NUM_THREADS": "4"})
    assert yours.env.settings["OMP_NUM_THREADS"].shown() == "OMP_NUM_THREADS=4  (yours)"
    assert "COMBINED_ENABLE" not in make([], CPU).env.settings


def test_torch_and_torch_npu_libraries_go_first_on_the_library_path(ascend, tmp_path):
    libs = {name: str(tmp_path / name / "lib") for name in ("torch", "torch_npu")}
    for folder in libs.values():
        Path(folder).mkdir(parents=True)
    plan = make([], A3, env=ascend, libs=libs)
    assert env_of(plan)["LD_LIBRARY_PATH"] == f"{libs['torch']}:{libs['torch_npu']}"
    settings = list(plan.env.settings.values())
    assert run.apply(settings, {"LD_LIBRARY_PATH": "/cann/lib64"})["LD_LIBRARY_PATH"] == \
        f"{libs['torch']}:{libs['torch_npu']}:/cann/lib64"  # in front of what CANN's set_env.sh left
    assert run.apply(settings, {})["LD_LIBRARY_PATH"] == f"{libs['torch']}:{libs['torch_npu']}"
    assert f"LD_LIBRARY_PATH={libs['torch']}:{libs['torch_npu']}:$LD_LIBRARY_PATH" in planning.dry_run(plan)


def test_zero_copy_is_off_unless_asked_for(ascend):
    one = make([], A3, env=ascend)
    assert env_of(one)["TORCH_HCCL_ZERO_COPY"] is None
    assert "TORCH_HCCL_ZERO_COPY" not in run.apply(list(one.env.settings.values()), {"TORCH_HCCL_ZERO_COPY": "1"})
    assert one.env.settings["TORCH_HCCL_ZERO_COPY"].source.startswith("off by default: a trial feature")
    two = {**ascend, "MASTER_ADDR": "10.0.0.1"}
    assert env_of(make(["--num_machines=2"], A3, env=two))["TORCH_HCCL_ZERO_COPY"] is None
    asked = make(["--num_machines=2"], A3, env={**two, "TORCH_HCCL_ZERO_COPY": "1"})
    assert env_of(asked)["TORCH_HCCL_ZERO_COPY"] == "1" and asked.env.settings["TORCH_HCCL_ZERO_COPY"].source == "yours"
    assert any("not for production" in note for note in asked.notes)
    by_option = make(["--hccl_zero_copy=1"], A3, env=ascend)
    assert env_of(by_option)["TORCH_HCCL_ZERO_COPY"] == "1"
    assert by_option.env.settings["TORCH_HCCL_ZERO_COPY"].source == "option --hccl_zero_copy=1"
    on_a2 = make([], A2, env={**ascend, "TORCH_HCCL_ZERO_COPY": "1"})
    assert env_of(on_a2)["TORCH_HCCL_ZERO_COPY"] is None  # unset
    assert "TORCH_HCCL_ZERO_COPY" not in run.training_environment(on_a2)
    assert "TORCH_HCCL_ZERO_COPY" not in env_of(make([], A2, env=ascend))
    forced = make(["--soc=a3", "--hccl_zero_copy=1"], Host("npu", 8, 8, "a3", "--soc"), env=ascend)
    assert env_of(forced)["TORCH_HCCL_ZERO_COPY"] == "1"
    with pytest.raises(options.UsageError, match="--hccl_zero_copy=yes: expected 0 \\(off\\) or 1"):
        make(["--hccl_zero_copy=yes"], A3, env=ascend)


@pytest.mark.parametrize("host, variable", [(A3, ("HCCL_DETERMINISTIC", "true")),
                                            (Host("cuda", 8, 8, "none", "torch sees 8"), ("CUBLAS_WORKSPACE_CONFIG", ":4096:8"))])
def test_deterministic_mode_exports_what_the_device_libraries_read(host, variable, ascend):
    name, value = variable
    assert name not in env_of(make([], host, env=ascend))
    plan = make(["--trainer.deterministic=true"], host, env=ascend)
    assert env_of(plan)[name] == value and plan.env.settings[name].source == "trainer.deterministic"
    assert f"  {name}={value}  (trainer.deterministic)" in planning.dry_run(plan)
    assert env_of(make(["--trainer.deterministic=true"], host, env={**ascend, name: "x"}))[name] == "x"  # yours
    assert not [n for n in ("HCCL_DETERMINISTIC", "CUBLAS_WORKSPACE_CONFIG")
                if n in env_of(make(["--trainer.deterministic=true"], CPU))]  # CPU: torch's flag in the trainer only


def test_timeouts_hccl_below_the_process_group_and_both_in_the_dry_run(ascend):
    plan = make([], A3, env=ascend)
    assert env_of(plan)["HCCL_EXEC_TIMEOUT"] == "540"
    assert ("timeouts: process group 600 s (trainer.collective_timeout_s, default) > HCCL_EXEC_TIMEOUT 540 s "
            "(90% of trainer.collective_timeout_s)") in planning.dry_run(plan)
    too_long = make([], A3, env={**ascend, "HCCL_EXEC_TIMEOUT": "1800"})
    (problem,) = [p for p in too_long.problems if "HCCL_EXEC_TIMEOUT" in p]
    assert problem.startswith("HCCL_EXEC_TIMEOUT=1800 (yours) must be a number of seconds below the process-group "
                              "timeout trainer.collective_timeout_s=600") and "the launcher derives 540" in problem


def test_two_nodes_derive_the_interface_from_the_route_and_match_it_exactly(ascend):
    env = {**ascend, "MASTER_ADDR": "10.0.0.1", "NNODES": "2", "NODE_RANK": "1"}
    plan = make([], A3, env=env)
    assert plan.shown["net_if"] == ("eth7", "derived: `ip route get 10.0.0.1`")
    assert plan.shown["machine_rank"] == ("1", "NODE_RANK")
    values = env_of(plan)
    assert (values["GLOO_SOCKET_IFNAME"], values["HCCL_SOCKET_IFNAME"], values["HCCL_IF_IP"]) == ("eth7", "=eth7", "10.0.0.5")
    assert "network: eth7 (derived: `ip route get 10.0.0.1`), IPv4 10.0.0.5" in planning.dry_run(plan)
    assert plan.log.endswith("/train.node1.log")
    assert plan.command[5:15] == ["--num_processes", "32", "--num_machines", "2", "--machine_rank", "1",
                                  "--main_process_ip", "10.0.0.1", "--main_process_port", "29500"]
    no_route = make([], A3, env=env, route=(None, "`ip route get 10.0.0.1` names no interface (unreachable)"))
    (problem,) = [p for p in no_route.problems if "interface" in p]
    assert problem == ("2 machines need the network interface for collectives: pass --net_if=NAME (or "
                       "DIT4DIT_NET_IF=NAME); `ip route get 10.0.0.1` names no interface (unreachable)")
    given = make(["--net_if=lo"], A3, env=env)
    assert given.shown["net_if"] == ("lo", "option --net_if") and env_of(given)["HCCL_SOCKET_IFNAME"] == "=lo"
    missing = make(["--net_if=ib9"], A3, env=env)
    assert any(p.startswith("network interface ib9 (option --net_if) does not exist here") for p in missing.problems)


def test_one_node_needs_no_interface_and_keeps_yours(ascend):
    plan = make([], A3, env={**ascend, "HCCL_SOCKET_IFNAME": "=bond0"}, route=(None, "unused"))
    assert env_of(plan)["HCCL_SOCKET_IFNAME"] == "=bond0" and "GLOO_SOCKET_IFNAME" not in env_of(plan)
    assert not [p for p in plan.problems if "interface" in p]


def test_npu_preflight_names_each_missing_piece(tmp_path):
    plain = tmp_path / "train.py"
    plain.write_text("import torch\n")
    plan = make(["--num_processes=17"], A3, env={"CANN_SET_ENV": str(tmp_path / "none.sh"),
                                                 "DIT4DIT_TRAIN_ENTRY": str(plain)}, torch_npu=False)
    text = "\n".join(plan.problems)
    assert f"CANN not found: no {tmp_path / 'none.sh'}" in text
    assert "torch_npu is not installed for /py/bin/python" in text
    assert "run  git apply patches/dit4dit_npu.patch" in text
    assert "--num_processes=17 per node but only 16 NPU devices are visible on this node" in text


def test_the_trainer_gets_cann_and_then_what_the_dry_run_shows(ascend):
    plan = make(["--max_train_steps=5"], A3, env={**ascend, "MASTER_ADDR": "10.0.0.1", "NNODES": "2",
                                                  "PYTHONPATH": "/repo", "HCCL_IF_IP": "10.9.9.9"})
    env = run.training_environment(plan)
    assert plan.cann_scripts == [ascend["CANN_SET_ENV"]] and env["ASCEND_HOME_PATH"] == "/x"  # sourced
    assert (env["HCCL_SOCKET_IFNAME"], env["HCCL_EXEC_TIMEOUT"], env["HCCL_IF_IP"]) == ("=eth7", "540", "10.0.0.5")
    assert env["PYTHONPATH"] == "/repo" and env["MASTER_ADDR"] == "10.0.0.1"  # the launcher's own, kept
    for name, value in env_of(plan).items():  # every variable of the dry run's environment block, as shown
        if plan.env.settings[name].exported and not plan.env.settings[name].prepend:
            assert env.get(name) == value, name
