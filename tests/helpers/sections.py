"""The typed sections of a config file, as the components that take them get them."""

from __future__ import annotations

from DiT4DiT.config.schema import load_config
from DiT4DiT.config.sections import ConfigSections, DatasetsVlaDataSection, FrameworkSection, TrainerSection
from DiT4DiT.config.typed import section


def run_sections(config_yaml, *overrides: str) -> tuple[FrameworkSection, TrainerSection, DatasetsVlaDataSection]:
    """(framework, trainer, data) of `config_yaml` with dotlist overrides: what the memory estimate, the memory
    plan and the resource check take."""
    typed = section(load_config(str(config_yaml), list(overrides)), ConfigSections)
    return typed.framework, typed.trainer, typed.datasets.vla_data
