"""Where each package module's direct tests are: `python scripts/tests_of_modules.py` prints the map.

The rule (docs/testing.md): DiT4DiT/<package>/.../<name>.py is tested in tests/test_<package>_<name>.py (`data`
stands for dataloader) or, where no other module has its name, tests/test_<name>.py; a root module DiT4DiT/<name>.py
in tests/test_<name>.py.
Where a module's direct tests live in a module named otherwise, ELSEWHERE says where (each named test module imports
the module or names its file). UNTESTED lists the modules that no test module tests directly yet, whose behaviour is
checked only inside whole runs (a launch, a served policy, a simulator); it is empty: every module has direct tests.
tests/test_tests_of_modules.py keeps all three current.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE, TESTS = ROOT / "DiT4DiT", ROOT / "tests"
SHORT = {"dataloader": "data"}  # the test modules' prefix for a package

ELSEWHERE = {
    "DiT4DiT.base_model.cosmos_2b": ("test_full_size_cosmos", "test_model_sizes"),
    "DiT4DiT.base_model.pipeline_folder": ("test_folder_checks",),
    "DiT4DiT.base_model.safetensors_header": ("test_folder_checks",),
    "DiT4DiT.config.errors": ("test_bad_inputs",),
    "DiT4DiT.config.keys": ("test_config",),
    "DiT4DiT.config.schema": ("test_config", "test_bad_inputs"),
    "DiT4DiT.config.typed": ("test_config_sections",),
    "DiT4DiT.dataloader.build": ("test_train_config",),
    "DiT4DiT.dataloader.config_checks": ("test_latent_store",),
    "DiT4DiT.dataloader.data_configs": ("test_data_lerobot", "test_data_original_mixtures"),
    "DiT4DiT.dataloader.dataset": ("test_image_augmentation", "test_serving_layout"),
    "DiT4DiT.dataloader.mixtures": ("test_data_original_mixtures", "test_bad_inputs"),
    "DiT4DiT.dataloader.modality": ("test_data_lerobot",),
    "DiT4DiT.dataloader.statistics": ("test_data_transforms",),
    "DiT4DiT.doctor.checks": ("test_doctor",),
    "DiT4DiT.doctor.hccl_ports": ("test_doctor",),
    "DiT4DiT.doctor.npu_network": ("test_doctor",),
    "DiT4DiT.doctor.requirement_pins": ("test_requirements_files", "test_requirements_resolved"),
    "DiT4DiT.doctor.store_estimate": ("test_latent_store",),
    "DiT4DiT.doctor.time_plan": ("test_doctor",),
    "DiT4DiT.evaluation.ensemble": ("test_evaluation",),
    "DiT4DiT.evaluation.errors": ("test_evaluation",),
    "DiT4DiT.evaluation.libero": ("test_evaluation",),
    "DiT4DiT.evaluation.metaworld": ("test_closed_loop_metaworld",),
    "DiT4DiT.evaluation.observations": ("test_closed_loop_metaworld", "test_serving_layout"),
    "DiT4DiT.evaluation.open_loop": ("test_evaluation",),
    "DiT4DiT.evaluation.server_policy": ("test_evaluation",),
    "DiT4DiT.evaluation.summary": ("test_evaluation",),
    "DiT4DiT.facts": ("test_folder_checks", "test_bad_inputs"),
    "DiT4DiT.host.npu_topology": ("test_doctor",),
    "DiT4DiT.host.output_paths": ("test_tool_outputs", "test_tiny_robotwin"),
    "DiT4DiT.host.process_lifetime": ("test_parallel", "test_closed_loop_eval"),
    "DiT4DiT.launch.host_kind": ("test_launch_plan", "test_launcher"),
    "DiT4DiT.launch.options": ("test_launch_plan",),
    "DiT4DiT.launch.preflight": ("test_launch_plan",),
    "DiT4DiT.memory.measured": ("test_memory_estimate",),
    "DiT4DiT.model.modules.latent_store": ("test_latent_store",),
    "DiT4DiT.model.framework.DiT4DiT": ("test_model_checkpoint", "test_compat_run_folder"),
    "DiT4DiT.model.framework.base_framework": ("test_model_checkpoint", "test_run_folders"),
    "DiT4DiT.model.framework.share_tools": ("test_model_errors",),
    "DiT4DiT.model.freezing": ("test_model_training",),
    "DiT4DiT.model.modules.action_model.rtc": ("test_flow_matching_head",),
    "DiT4DiT.model.modules.cosmos_pipeline": ("test_cosmos_backbone", "test_model_checkpoint"),
    "DiT4DiT.model.modules.host_to_device": ("test_model_host_copies",),
    "DiT4DiT.model.modules.prompt_encoding": ("test_prompt_store", "test_cosmos_backbone"),
    "DiT4DiT.model.modules.weights": ("test_model_checkpoint",),
    "DiT4DiT.serving.server": ("test_serving", "test_serving_safety"),
    "DiT4DiT.serving.stage_timing": ("test_serving_policy",),
    "DiT4DiT.tools.latent_store": ("test_latent_store",),
    "DiT4DiT.tools.export_checkpoint": ("test_compat_run_folder", "test_tool_outputs"),
    "DiT4DiT.tools.measure_activation_memory": ("test_memory_estimate",),
    "DiT4DiT.tools.modality": ("test_data_lerobot",),
    "DiT4DiT.tools.synthetic_inputs": ("test_model_attention",),
    "DiT4DiT.tools.tiny_cosmos": ("test_cosmos_backbone", "test_full_size_cosmos"),
    "DiT4DiT.tools.tiny_dataset": ("test_data_lerobot",),
    "DiT4DiT.training.input_checks": ("test_config", "test_data_errors"),
    "DiT4DiT.training.metrics": ("test_metrics_once", "test_original_names"),
    "DiT4DiT.training.optim": ("test_train",),
    "DiT4DiT.training.preemption": ("test_run_safety", "test_errors"),
    "DiT4DiT.training.resume": ("test_run_safety", "test_run_folders"),
    "DiT4DiT.training.run_dir": ("test_run_safety", "test_long_runs"),
    "DiT4DiT.yaml_files": ("test_bad_inputs",),
}

UNTESTED: set[str] = set()


def package_modules() -> list[str]:
    """Every module of DiT4DiT/ (package __init__ and __main__ files left out), dotted."""
    return sorted(".".join(path.relative_to(ROOT).with_suffix("").parts) for path in PACKAGE.rglob("*.py")
                  if path.name not in ("__init__.py", "__main__.py"))


def named_test(module: str) -> str | None:
    """The test module named after `module` by the rule, where one exists."""
    parts = module.split(".")[1:]
    package, name = (parts[0], parts[-1]) if len(parts) > 1 else (None, parts[0])
    shared = sum(other.rsplit(".", 1)[1] == name for other in package_modules()) > 1
    names = [f"test_{name}"] if not (package and shared) else []
    if package:
        names += [f"test_{package}_{name}", f"test_{SHORT.get(package, package)}_{name}"]
    return next((test for test in names if (TESTS / f"{test}.py").is_file()), None)


def reaches(test: str, module: str) -> bool:
    """Whether test module `test` imports `module` (or something from it) or names its file."""
    text = (TESTS / f"{test}.py").read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == module or any(f"{node.module}.{alias.name}" == module for alias in node.names):
                return True
        elif isinstance(node, ast.Import) and any(alias.name == module for alias in node.names):
            return True
    return f"{module.replace('.', '/')}.py".removeprefix("DiT4DiT/") in text


def tests_of(module: str) -> tuple[str, ...]:
    named = named_test(module)
    return (named,) if named else ELSEWHERE.get(module, ())


def problems() -> list[str]:
    """What breaks the rule: a module with no home for its tests, and stale or wrong entries of the two tables."""
    modules, found = package_modules(), []
    for module in modules:
        named, listed, untested = named_test(module), module in ELSEWHERE, module in UNTESTED
        if named and (listed or untested):
            found.append(f"{module}: tests/{named}.py is named after it; drop it from "
                         f"{'ELSEWHERE' if listed else 'UNTESTED'}")
        elif not (named or listed or untested):
            found.append(f"{module}: no tests/test_<name>.py; write one, or list it in ELSEWHERE (where its tests are)")
        elif listed and untested:
            found.append(f"{module}: in both ELSEWHERE and UNTESTED")
        for test in ELSEWHERE.get(module, ()):
            if not (TESTS / f"{test}.py").is_file():
                found.append(f"{module}: ELSEWHERE names tests/{test}.py, which does not exist")
            elif not reaches(test, module):
                found.append(f"{module}: tests/{test}.py neither imports it nor names its file")
    found += [f"{module}: listed but not a module of DiT4DiT/" for module in sorted((set(ELSEWHERE) | UNTESTED) - set(modules))]
    return found


def main() -> int:
    for module in package_modules():
        tests = tests_of(module)
        print(f"{module.removeprefix('DiT4DiT.'):48} {', '.join(f'tests/{t}.py' for t in tests) or '(no direct tests yet)'}")
    for problem in problems():
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems() else 0


if __name__ == "__main__":
    sys.exit(main())
