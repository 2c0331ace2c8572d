"""The doctor on this CPU host, and on A2/A3 hosts played by the fake npu-smi (tests/fakes/bin): once as users run
it (a process), otherwise its main() in this process; its own probes run as processes either way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from DiT4DiT.doctor.checks import hccl_problems, patcher_api, torch_npu_matches
from DiT4DiT.memory.estimate import estimate_training_memory, mixture_views, safetensors_param_count
from DiT4DiT.host.npu_topology import detect_soc, parse_npu_smi, visible_ids
from helpers.in_process import call_main
from helpers.doctor_runs import ROOT, TINY_YAML, doctor, doctor_env, doctor_process, fake_npu_smi
from helpers.sections import run_sections


@pytest.mark.slow
def test_cpu_host_passes_and_skips_the_npu_checks(tiny_pipeline_dir):
    code, lines = doctor_process("--config_yaml", str(TINY_YAML), "--base_model", str(tiny_pipeline_dir), "--num_processes", "2")
    assert code == 0, lines
    for name in ("npu_devices", "a2_a3_zero_copy", "cann_env", "shared_libs", "mx_driving", "hccl_env"):
        assert lines[name].startswith("SKIP"), lines[name]
    assert "CPU host, 2 CPU process(es)" in lines["npu_devices"]
    assert lines["stack_versions"].startswith("PASS") and "no torch_npu" in lines["stack_versions"]
    assert lines["base_model"].startswith("PASS") and lines["config"].startswith("PASS")
    assert lines["device_memory"].startswith("SKIP") and "need ~" in lines["device_memory"]


def test_a_config_that_is_a_yaml_list_is_one_failed_check(tmp_path):
    (tmp_path / "list.yaml").write_text("- run_id: a\n- trainer: {}\n")
    code, lines = doctor("--config_yaml", str(tmp_path / "list.yaml"))
    assert code == 1
    assert lines["config"].startswith("FAIL") and "the file is a list" in lines["config"]


def test_a_data_config_the_registry_lacks_is_one_failed_check(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(TINY_YAML.read_text().replace("data_mix: robotwin", "data_mix: robotwin\n    data_config: robotwn"))
    code, lines = doctor("--config_yaml", str(config))
    assert code == 1
    assert lines["config"].startswith("FAIL") and "data_config='robotwn' is not a data config" in lines["config"]


@pytest.mark.slow
def test_incomplete_base_model_fails_with_the_download_command(tmp_path, tiny_pipeline_dir):
    code, lines = doctor("--config_yaml", str(TINY_YAML), "--base_model", str(tmp_path / "missing"))
    assert code == 1
    assert lines["base_model"].startswith("FAIL") and "does not exist" in lines["base_model"]
    assert "huggingface-cli download nvidia/Cosmos-Predict2.5-2B --revision diffusers/base/post-trained" in lines["base_model"]


@pytest.mark.slow
@pytest.mark.parametrize("layout, asked, status", [("a2", 16, "FAIL"), ("a2", 8, "PASS"), ("a3", 16, "PASS")])
def test_num_processes_against_visible_devices(layout, asked, status):
    code, lines = doctor("--num_processes", str(asked), "--config_yaml", str(TINY_YAML), layout=layout)
    assert lines["npu_devices"].startswith(status), lines["npu_devices"]
    assert code == 1  # no CANN and no torch_npu here: an NPU host that cannot train
    assert lines["cann_env"].startswith("FAIL") and lines["stack_versions"].startswith("FAIL")
    if status == "FAIL":
        assert "use --num_processes=8 or fewer" in lines["npu_devices"]


@pytest.mark.slow
def test_zero_copy_on_a2_fails_and_a3_needs_expandable_segments():
    _, a2 = doctor("--config_yaml", str(TINY_YAML), layout="a2", TORCH_HCCL_ZERO_COPY="1")
    assert a2["a2_a3_zero_copy"].startswith("FAIL") and "unset TORCH_HCCL_ZERO_COPY" in a2["a2_a3_zero_copy"]
    _, a3 = doctor("--config_yaml", str(TINY_YAML), layout="a3", TORCH_HCCL_ZERO_COPY="1")
    assert a3["a2_a3_zero_copy"].startswith("FAIL") and "expandable_segments:True" in a3["a2_a3_zero_copy"]
    _, a3_ok = doctor("--config_yaml", str(TINY_YAML), layout="a3", TORCH_HCCL_ZERO_COPY="1",
                      PYTORCH_NPU_ALLOC_CONF="expandable_segments:True")
    assert a3_ok["a2_a3_zero_copy"].startswith("PASS")
    _, forced = doctor("--config_yaml", str(TINY_YAML), "--soc", "a2", layout="a3", TORCH_HCCL_ZERO_COPY="1")
    assert forced["a2_a3_zero_copy"].startswith("FAIL") and "A2 (--soc)" in forced["a2_a3_zero_copy"]


@pytest.mark.slow
def test_device_memory_compares_the_estimate_with_free_hbm(tiny_pipeline_dir):
    args = ("--config_yaml", str(TINY_YAML), "--base_model", str(tiny_pipeline_dir))
    _, idle = doctor(*args, layout="a3")
    assert idle["device_memory"].startswith("PASS") and "60.7 GiB free" in idle["device_memory"]
    _, full = doctor(*args, layout="a3", FAKE_NPU_SMI_HBM_USED_MB="65536")
    assert full["device_memory"].startswith("FAIL") and "0.0 GiB free" in full["device_memory"]


@pytest.mark.slow
def test_hccl_variables_are_validated():
    _, lines = doctor("--config_yaml", str(TINY_YAML), layout="a2", HCCL_CONNECT_TIMEOUT="60")
    assert lines["hccl_env"].startswith("FAIL") and "outside [120, 7200]" in lines["hccl_env"]
    assert hccl_problems({}) == []
    assert hccl_problems({"HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": "1800"}) == []
    assert hccl_problems({"HCCL_EXEC_TIMEOUT": "3600"}) == ["HCCL_EVENT_TIMEOUT (1868) must exceed HCCL_EXEC_TIMEOUT (3600)"]
    assert hccl_problems({"HCCL_EXEC_TIMEOUT": "0"}) == []  # 0 = never time out
    assert hccl_problems({"HCCL_CONNECT_TIMEOUT": "2m"}) == ["HCCL_CONNECT_TIMEOUT='2m' is not a whole number of seconds"]


def test_patcher_api_generations():
    assert patcher_api(has_add=True, builder=True) == "2.0"  # PyPI 26.x: 2.0 plus the legacy shim
    assert patcher_api(has_add=False, builder=True) == "1.0"  # branches up to v26.0.0 export a Patcher without add
    assert patcher_api(has_add=False, builder=False) is None


@pytest.mark.slow
@pytest.mark.parametrize("fake, api", [(ROOT / "tests/fakes/mx_driving_v1", "1.0"), (ROOT / "tests/fakes/mx_driving_v2", "2.0")])
def test_patcher_probe_tells_the_generations_apart(fake, api):
    from DiT4DiT.doctor.checks import MX_DRIVING_PROBE  # the probe the doctor runs, run here on the fakes

    path = os.pathsep.join([str(fake), str(ROOT / "tests/fakes/torch_npu")])
    out = subprocess.run([sys.executable, "-c", MX_DRIVING_PROBE], env={**os.environ, "PYTHONPATH": path},
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out.splitlines()[-1])
    assert patcher_api(found["has_add"], found["builder"]) == api


@pytest.mark.slow
@pytest.mark.parametrize("fake, env, line", [
    ("mx_driving_v2", {}, "applied numpy_compat, tensor_index, batch_matmul; importing mx_driving set "
                          "ASCEND_CUSTOM_OPP_PATH="),
    ("mx_driving_v2", {"DIT4DIT_MX_PATCHER": "lean"}, "applied numpy_compat; left out tensor_index, batch_matmul; "
                                                      "importing"),
    ("mx_driving_v1", {}, "mx_driving patcher (default; mx-driving version unknown, API 1.0): applied numpy_type, "
                          "index, batch_matmul (DIT4DIT_MX_PATCHER=off skips it)"),
    ("mx_driving_v1", {"DIT4DIT_MX_PATCHER": "off"}, "mx_driving patcher: off (DIT4DIT_MX_PATCHER=off"),
])
def test_patcher_probe_names_what_the_trainer_applies(fake, env, line):
    """The doctor runs the patched trainer's patcher step in a child: mmcv is not installed here, so of the
    default patcher only the numpy aliases (and, with `default`, the two global torch patches) apply."""
    from DiT4DiT.doctor.checks import MX_PATCHER_PROBE

    path = os.pathsep.join([str(ROOT / "tests/fakes" / fake), str(ROOT / "tests/fakes/torch_npu")])
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DIT4DIT_")}
    out = subprocess.run([sys.executable, "-c", MX_PATCHER_PROBE], env={**environment, "PYTHONPATH": path, **env},
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out.splitlines()[-1])
    assert line in found["line"] and found["problem"] is False


@pytest.mark.slow
def test_python_version_and_nodes_are_reported():
    _, lines = doctor("--config_yaml", str(TINY_YAML), "--num_processes", "2", "--num_machines", "3")
    assert lines["python"].startswith("PASS") and f"Python {sys.version.split()[0]}" in lines["python"]
    assert "3 nodes x 2 process(es) per node = 6 processes" in lines["nodes"]


@pytest.mark.slow
def test_processes_holding_npus_are_listed():
    _, busy = doctor("--config_yaml", str(TINY_YAML), layout="a3")
    assert busy["npu_processes"].startswith("WARN")
    assert "pid 632268 python3.10 on NPU 0 chip 0 (197 MB)" in busy["npu_processes"]
    _, idle = doctor("--config_yaml", str(TINY_YAML), layout="a3", FAKE_NPU_SMI_IDLE="1")
    assert idle["npu_processes"].startswith("PASS")
    _, hidden = doctor("--config_yaml", str(TINY_YAML), layout="a3", ASCEND_RT_VISIBLE_DEVICES="2,3")
    assert hidden["npu_processes"].startswith("PASS")  # NPU 0 is not one of this run's devices


@pytest.mark.slow
def test_device_check_is_per_node():
    _, two_nodes = doctor("--config_yaml", str(TINY_YAML), "--num_processes", "16", "--num_machines", "2", layout="a3")
    assert two_nodes["npu_devices"].startswith("PASS")
    _, too_many = doctor("--config_yaml", str(TINY_YAML), "--num_processes", "17", "--num_machines", "2", layout="a3")
    assert too_many["npu_devices"].startswith("FAIL") and "--num_processes 17 per node" in too_many["npu_devices"]


def test_torch_npu_release_must_match_torch():
    assert torch_npu_matches("2.7.1", "2.7.1.post4") and torch_npu_matches("2.7.1+cpu", "2.7.1")
    assert not torch_npu_matches("2.7.1", "2.6.0.post3") and not torch_npu_matches("2.8.0", "2.7.1.post4")


def test_npu_smi_tables_parse_into_devices():
    a2 = parse_npu_smi(fake_npu_smi("a2"))
    assert len(a2) == 8 and detect_soc(a2) == "a2"
    assert [c.npu for c in a2] == list(range(8)) and all(c.phy_id is None and c.name == "910B3" for c in a2)
    a3 = parse_npu_smi(fake_npu_smi("a3", FAKE_NPU_SMI_HBM_USED_MB="1000"))
    assert len(a3) == 16 and detect_soc(a3) == "a3"
    assert [c.phy_id for c in a3] == list(range(16)) and [c.chip for c in a3[:4]] == [0, 1, 0, 1]
    assert {c.hbm_free_mb for c in a3} == {65536 - 1000}
    assert parse_npu_smi("") == []


def test_ascend_rt_visible_devices_rules():
    assert visible_ids(16, None) == list(range(16))
    assert visible_ids(8, "0,2,5") == [0, 2, 5]
    assert visible_ids(8, "3,1,4") == [3]  # must ascend: parsing stops
    assert visible_ids(8, "1,x,2") == [1]  # stops at the first invalid ID
    assert visible_ids(8, "9") == []  # out of range


def sections(*overrides: str):
    return run_sections(TINY_YAML, *overrides)


def test_parameter_count_and_estimate_scale(tiny_pipeline_dir):
    from diffusers import CosmosTransformer3DModel

    transformer = CosmosTransformer3DModel.from_pretrained(tiny_pipeline_dir / "transformer")
    assert safetensors_param_count(tiny_pipeline_dir / "transformer") == sum(p.numel() for p in transformer.parameters())
    one, two = (estimate_training_memory(tiny_pipeline_dir, *sections(), n, views=3) for n in (1, 2))
    assert two.static_gib < one.static_gib and two.activation_gib == one.activation_gib
    two_four_eight = [estimate_training_memory(tiny_pipeline_dir, *sections(f"datasets.vla_data.per_device_batch_size={b}"),
                                               1, 3).activation_gib for b in (2, 4, 8)]
    # Activations grow with the batch (plus what one pass holds whatever the batch).
    assert two_four_eight[2] - two_four_eight[1] == pytest.approx(2 * (two_four_eight[1] - two_four_eight[0]))
    assert two_four_eight[0] > 0
    # 5 frames -> 2 latent frames; 32x96 pixels -> 2x6 patches: 24 tokens per sample.
    assert one.tokens_per_sample == 24


def test_estimate_counts_what_the_freeze_list_freezes_and_the_mixtures_cameras(tiny_pipeline_dir):
    assert (mixture_views("robotwin"), mixture_views("gr1_pick_place")) == (3, 1)
    estimate = lambda freeze, views=3: estimate_training_memory(  # noqa: E731
        tiny_pipeline_dir, *sections(f"trainer.freeze_modules={freeze}"), 1, views)
    listed = estimate("backbone_interface.extractor.text_encoder,backbone_interface.extractor.vae,"
                      "backbone_interface.extractor.transformer")
    # A parent path freezes everything below it, as freeze_modules does.
    assert estimate("backbone_interface").static_gib == listed.static_gib < estimate("").static_gib
    one_camera = estimate("", views=1)
    assert one_camera.tokens_per_sample * 3 == estimate("").tokens_per_sample
@pytest.mark.slow
def test_prompt_store_and_host_memory_estimates(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    config = TINY_YAML.read_text().replace("data_root_dir: playground/Datasets/robotwin_tiny",
                                           f"data_root_dir: {tiny_robotwin_root}")
    config = config.replace("prompt_cache: true", f"prompt_cache: true\n    prompt_store_dir: {tmp_path / 'store'}")
    (tmp_path / "config.yaml").write_text(config)
    code, lines = doctor("--config_yaml", str(tmp_path / "config.yaml"), "--base_model", str(tiny_pipeline_dir),
                         "--num_processes", "16")
    assert code == 0, lines
    tasks = {json.loads(line)["task"] for path in tiny_robotwin_root.glob("*/meta/tasks.jsonl")
             for line in path.read_text().splitlines() if line.strip()}
    # 64 tokens x (2 layers x 32) x 4 bytes = 16 KiB per instruction in the tiny pipeline.
    assert lines["prompt_store"].startswith("PASS"), lines["prompt_store"]
    assert f"{len(tasks)} instructions x 0.0 MiB" in lines["prompt_store"] and str(tmp_path / "store") in lines["prompt_store"]
    assert lines["host_memory"].split()[0] in ("PASS", "WARN") and "16 process(es) x (" in lines["host_memory"]
    assert not (tmp_path / "store").exists()  # estimating writes nothing
    # The latent store is off in this config: the line still says what it would hold and take to build.
    clips = sum(json.loads(line)["length"] for path in tiny_robotwin_root.glob("*/meta/episodes.jsonl")
                for line in path.read_text().splitlines() if line.strip())
    assert lines["latent_store"].startswith("PASS  latent_store    framework.cosmos25.latent_cache is off")
    assert f"{clips} clips (9 episodes of 3 datasets)" in lines["latent_store"]
    assert "h on 16 A3 process(es) at 25% of peak" in lines["latent_store"]


@pytest.mark.slow
def test_a_dataset_it_cannot_read_makes_the_store_estimate_a_warning_naming_the_file(tiny_pipeline_dir, tiny_robotwin_root, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_robotwin_root, data)
    broken = sorted(data.glob("*/meta/info.json"))[0]
    broken.write_text("{")
    config = tmp_path / "config.yaml"
    config.write_text(TINY_YAML.read_text().replace("data_root_dir: playground/Datasets/robotwin_tiny", f"data_root_dir: {data}"))
    _, lines = doctor("--config_yaml", str(config), "--base_model", str(tiny_pipeline_dir))
    assert lines["prompt_store"].startswith("WARN") and "could not estimate the store: DataError" in lines["prompt_store"]
    assert str(broken) in lines["prompt_store"], lines["prompt_store"]


def test_the_doctor_never_imports_torch(tiny_pipeline_dir):
    """A torch_npu that breaks `import torch` must not take the doctor down; only its probes import torch."""
    run = ("import sys\nfrom DiT4DiT.doctor.checks import main\n"
           f"main(['--config_yaml', {str(TINY_YAML)!r}, '--base_model', {str(tiny_pipeline_dir)!r}])\n"
           "print(sorted(m for m in ('torch', 'DiT4DiT.model') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", run], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert "PASS  prompt_store" in result.stdout or "WARN  prompt_store" in result.stdout, result.stdout
    assert result.stdout.splitlines()[-1] == "[]"


@pytest.mark.slow  # its probes start Python processes that import torch
def test_npu_network_ports_are_checked_per_device_with_hccn_tool():
    _, healthy = doctor("--config_yaml", str(TINY_YAML), "--num_machines", "2", layout="a3")
    assert healthy["npu_network"].startswith("PASS") and "16 NPU ports: link UP" in healthy["npu_network"]
    _, down = doctor("--config_yaml", str(TINY_YAML), "--num_machines", "2", layout="a3", FAKE_HCCN_LINK_DOWN="3",
                     FAKE_HCCN_NO_IP="5")
    assert down["npu_network"].startswith("FAIL")
    assert "2 of 16 NPU ports not ready (device 3: link DOWN, net health Init; device 5: no IP address)" in down["npu_network"]
    _, one_node = doctor("--config_yaml", str(TINY_YAML), layout="a2", FAKE_HCCN_LINK_DOWN="0")
    assert one_node["npu_network"].startswith("WARN") and "1 of 8" in one_node["npu_network"]
    _, hidden = doctor("--config_yaml", str(TINY_YAML), "--num_machines", "2", layout="a3", FAKE_HCCN_LINK_DOWN="0",
                       ASCEND_RT_VISIBLE_DEVICES="1,2")
    assert hidden["npu_network"].startswith("PASS") and "2 NPU ports" in hidden["npu_network"]


def test_hccn_tool_output_is_read_by_its_field_names():
    from DiT4DiT.doctor.npu_network import Port, fields

    assert fields("ipaddr:29.0.0.1\nnetmask:255.255.255.0\n") == {"ipaddr": "29.0.0.1", "netmask": "255.255.255.0"}
    assert fields("link status: UP\n") == {"link status": "UP"}
    assert fields("net health status: Socket fail\n") == {"net health status": "Socket fail"}
    assert Port(0, "UP", "29.0.0.1", "Success").problems() == []
    assert Port(1, None, None, "Init").problems() == ["link unknown", "no IP address", "net health Init"]


@pytest.mark.slow  # its probes start Python processes that import torch
def test_cann_python_packages_must_import_on_npu_hosts():
    _, cpu = doctor("--config_yaml", str(TINY_YAML))
    assert cpu["cann_python"].startswith("SKIP")
    _, npu = doctor("--config_yaml", str(TINY_YAML), layout="a3")
    # This CPU environment lacks CANN's packages (they are pinned in requirements-npu.txt only).
    assert npu["cann_python"].startswith("FAIL") and "decorator (ModuleNotFoundError" in npu["cann_python"]
    assert "pip install -r requirements-npu.txt" in npu["cann_python"]


@pytest.mark.parametrize("given", ["inf", "1e30", "1e309", "nan", "0", "-60"])
def test_a_device_memory_outside_its_range_is_refused_naming_it(given):
    # inf, 1e30 and 1e309 said any run fits; nan gave a FAIL that meant nothing.
    from DiT4DiT.doctor.checks import main

    result = call_main(main, ["--config_yaml", str(TINY_YAML), "--device_memory_gib", given], doctor_env(None, {}))
    assert result.returncode == 2, result.stdout
    (line,) = result.stderr.strip().splitlines()[-1:]
    shown = f"{float(given):g}"
    assert f"--device_memory_gib {shown}: expected the free memory of one device in GiB, more than 0 and at most " \
           "1024" in line, result.stderr
    assert not result.stdout  # no check ran


@pytest.mark.parametrize("given", ["100000000000000000000", "0"])
def test_the_launcher_refuses_the_same_device_memory(given):
    from helpers.launcher_runs import plan

    result = plan("--dry-run", f"--device_memory_gib={given}", layout=None)
    assert result.returncode == 2
    assert f"--device_memory_gib {float(given):g}: expected the free memory of one device" in result.stderr
# -- HCCL's host ports ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reserved, base, status", [
    ("\n", None, "WARN"), ("60000-60031\n", None, "PASS"), ("8080,60000-60015\n", None, "WARN"),
    ("61000-61031\n", "61000", "PASS"),
], ids=["none reserved", "reserved", "half reserved", "another base, reserved"])
def test_hccl_host_ports_must_be_reserved_where_the_ephemeral_range_covers_them(tmp_path, reserved, base, status):
    from DiT4DiT.doctor.hccl_ports import port_check

    (tmp_path / "ip_local_reserved_ports").write_text(reserved)
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    env = {"HCCL_IF_BASE_PORT": base} if base else {}
    got, detail, fix = port_check(env, tmp_path)
    assert got == status, detail
    if status == "WARN":
        assert "in the ephemeral range (32768-60999) and not reserved" in detail
        assert fix.startswith("sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031")
    (tmp_path / "ip_local_port_range").write_text("32768\t59999\n")  # a range below HCCL's: nothing to reserve
    assert port_check({}, tmp_path)[0] == "PASS"


@pytest.mark.slow
def test_the_doctor_checks_hccl_ports_on_an_npu_host_and_prints_a_time_plan(tiny_pipeline_dir):
    _, lines = doctor("--config_yaml", str(TINY_YAML), "--base_model", str(tiny_pipeline_dir), layout="a3")
    assert lines["hccl_ports"].startswith(("PASS", "WARN"))  # this host's own settings
    assert lines["time_plan"].startswith("PASS  time_plan       projection at an assumed 30% MFU: ")
    assert all(device in lines["time_plan"] for device in ("A3 die", "A2", "H200"))
    _, cpu = doctor("--config_yaml", str(TINY_YAML), "--base_model", str(tiny_pipeline_dir), "--assumed_mfu", "0.5")
    assert cpu["hccl_ports"].startswith("SKIP") and "at an assumed 50% MFU" in cpu["time_plan"]


def test_the_time_plan_is_the_steps_flops_at_the_assumed_mfu(tmp_path, capsys):
    """The doctor's projection divides each device's FLOPs per optimizer step by its bf16 peak times the MFU; the
    table command prints it for the original's four configs."""
    from DiT4DiT.doctor import time_plan
    from DiT4DiT.memory.plan import ORIGINAL_CONFIGS
    from DiT4DiT.doctor.step_flops import snapshot_configs, training_step_flops
    from DiT4DiT.tools.full_size_cosmos import write_shapes_only
    from helpers.sections import run_sections

    shapes = write_shapes_only(tmp_path / "shapes")
    framework, trainer, data = run_sections(ROOT / ORIGINAL_CONFIGS["robotwin"],
                                            "trainer.gradient_accumulation_steps=2")
    flops = training_step_flops(*snapshot_configs(shapes), framework, trainer, data, 3, 4).total
    tflop = time_plan.step_tflop(shapes, framework, trainer, data, 3)
    assert tflop == pytest.approx(2 * flops / 1e12)
    seconds, hours = time_plan.projections(tflop, 100_000, 0.3)["A3 die"]
    assert seconds == pytest.approx(tflop / (376 * 0.3)) and hours == pytest.approx(seconds * 100_000 / 3600)
    assert time_plan.main(["--base_model", str(shapes)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(ORIGINAL_CONFIGS)
