"""What must be true before any process starts, each failed check one line with its fix."""

from __future__ import annotations

from pathlib import Path

from DiT4DiT.facts import TINY_DATA_DIR
from DiT4DiT.launch import folder_checks
from DiT4DiT.launch.host_kind import Host
from DiT4DiT.base_model.pipeline_folder import pipeline_folder_problems

PATCH_MARK = "from torch_npu.contrib import transfer_to_npu"
MX_PATCHER_MODES = ("lean", "default", "off")


def cann_scripts(env: dict[str, str]) -> tuple[list[str], str]:
    """(set_env.sh scripts to source, in order; what the dry run says), or ([], "") when CANN is not found.

    CANN 9.0 installs to <root>/cann, older releases and the torch_npu README to <root>/ascend-toolkit; the
    NNAL/ATB libraries bring their own set_env.sh. CANN_SET_ENV names the one script to source.
    """
    if env.get("CANN_SET_ENV"):
        path = env["CANN_SET_ENV"]
        return ([path], path) if Path(path).is_file() else ([], "")
    root = Path(env.get("ASCEND_INSTALL_ROOT", "/usr/local/Ascend"))
    found = [p for p in (root / "cann/set_env.sh", root / "ascend-toolkit/set_env.sh") if p.is_file()][:1]
    if found and (root / "nnal/atb/set_env.sh").is_file():
        found.append(root / "nnal/atb/set_env.sh")
    if found:
        return [str(p) for p in found], str(found[0])
    home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    return ([], f"already sourced (ASCEND_HOME_PATH={home})") if home else ([], "")


def cann_candidates(env: dict[str, str]) -> list[str]:
    if env.get("CANN_SET_ENV"):
        return [env["CANN_SET_ENV"]]
    root = Path(env.get("ASCEND_INSTALL_ROOT", "/usr/local/Ascend"))
    return [str(root / "cann/set_env.sh"), str(root / "ascend-toolkit/set_env.sh")]


def patch_problem(entry: Path) -> str:
    if not entry.is_file():
        return f"trainer {entry} not found"
    if PATCH_MARK not in entry.read_text(errors="replace"):
        return f"the NPU patch is not applied ({entry} lacks '{PATCH_MARK}'): run  git apply patches/dit4dit_npu.patch"
    return ""


def device_problem(host: Host, per_node: int, env: dict[str, str]) -> str:
    """This node's processes against this node's visible devices ("" when they fit)."""
    if host.kind == "cpu" or host.problem:
        return ""
    kind = host.kind.upper()
    if host.kind == "npu":
        seen = f"npu-smi lists {host.total} ({host.soc.upper()})"
        if "ASCEND_RT_VISIBLE_DEVICES" in env:
            seen += f", ASCEND_RT_VISIBLE_DEVICES={env['ASCEND_RT_VISIBLE_DEVICES']}"
        fix, sizes = f"ascending IDs below {host.total} in ASCEND_RT_VISIBLE_DEVICES", \
            " (an Atlas 800T A3 node has 16 devices, an A2 node 8)"
    else:
        seen = f"torch sees {host.total}" + (f", CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}"
                                             if "CUDA_VISIBLE_DEVICES" in env else "")
        fix, sizes = "CUDA_VISIBLE_DEVICES", ""
    if host.visible == 0:
        return f"no {kind} device is visible ({seen}); fix {fix}"
    if per_node > host.visible:
        return (f"--num_processes={per_node} per node but only {host.visible} {kind} devices are visible on this node "
                f"({seen}); pass --num_processes={host.visible} or fewer{sizes}")
    return ""


def _same(a: str, b: str, repo: Path) -> bool:
    try:
        return (repo / a).resolve() == (repo / b).resolve()
    except (RuntimeError, OSError):  # a link loop, already reported as a folder that does not exist
        return False


def folder_problems(base_model: str, data_root: str, data_mix: str | None, repo: Path) -> list[str]:
    """The base model and data checks: the data root, or the dataset folder / mixture file a path data_mix names;
    `data_mix` only when the user named it (the trainer rules on the YAML's own mixture)."""
    problems = []
    if not base_model:
        problems.append("framework.cosmos25.base_model is not set: pass --base_model=DIR")
    else:
        problems += pipeline_folder_problems(base_model, relative_to=repo)
    if data_mix and folder_checks.names_files(data_mix):
        problems += [f"{found}\n    fix: give a LeRobot dataset folder, a folder of them or a mixture file"
                     for found in folder_checks.data_mix_problems(data_mix)]
    elif not data_root:
        problems.append("datasets.vla_data.data_root_dir is not set: pass --data_root_dir=DIR")
    else:
        found = folder_checks.data_root_problems(repo / data_root, data_mix)
        if found:
            fix = (f"python -m DiT4DiT.tools.tiny_robotwin --out {TINY_DATA_DIR}" if _same(data_root, TINY_DATA_DIR, repo)
                   else f"put the LeRobot datasets of the '{data_mix or 'configured'}' mixture under {data_root}")
            problems += [*found[:-1], f"{found[-1]}\n    fix: {fix}"]
    return problems


def memory_plan_lines(config_yaml: Path, forwarded: list[str], base_model: str, launch_config: Path, per_node: int,
                      machines: int, kind: str, free_gib: float) -> tuple[list[str], bool]:
    """(the memory plan for people, whether the run fits) for the config with the user's overrides; ([], True)
    when there is nothing to plan with (no safetensors)."""
    from DiT4DiT.config.schema import load_config, normalize_cli_overrides
    from DiT4DiT.memory import plan as memory_plan
    from DiT4DiT.memory.estimate import mixture_views

    typed = load_config(str(config_yaml), normalize_cli_overrides(forwarded))
    data = typed.datasets.vla_data
    views = mixture_views(data.data_mix, data.data_config)
    run = memory_plan.launch_run(launch_config, per_node, machines)
    result = memory_plan.plan(Path(base_model), typed.framework, typed.trainer, data, run, views, free_gib, kind)
    if result is None:
        return [], True
    return result.lines(), result.fits
