"""The typed sections are the schema: their defaults are what loads without a YAML, each field's annotation is what
loading enforces (type, Literal choices, null), and a loaded config fills them frozen."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Literal

import pytest

from DiT4DiT.config import sections
from DiT4DiT.config.keys import Key, coerce, declared
from DiT4DiT.config.schema import KNOWN_KEYS, OPEN_NODES, ConfigError, load_config
from DiT4DiT.config.typed import section

ROBOTWIN = "DiT4DiT/config/robotwin/dit4dit_robotwin.yaml"


def _fields(cls=sections.ConfigSections, prefix=""):
    """(dotted path, annotation) of every key field, read from the dataclasses themselves."""
    hints = typing.get_type_hints(cls, vars(sections))
    for field in dataclasses.fields(cls):
        path, hint = prefix + field.name, hints[field.name]
        if dataclasses.is_dataclass(hint):
            yield from _fields(hint, path + ".")
        else:
            yield path, hint


def _parts(hint):
    """(scalar type, a list of it?, null allowed?, Literal choices) of a field's annotation."""
    args = typing.get_args(hint)
    nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if nullable:
        hint = next(a for a in args if a is not type(None))
    is_list = typing.get_origin(hint) is list
    if is_list:
        hint = typing.get_args(hint)[0]
    choices = typing.get_args(hint) if typing.get_origin(hint) is Literal else ()
    return (type(choices[0]) if choices else hint), is_list, nullable, choices


FIELDS = {path: _parts(hint) for path, hint in _fields() if path not in OPEN_NODES}


def test_every_field_is_a_loaded_key():
    entries = {k for k in KNOWN_KEYS if k.rpartition(".")[0] in OPEN_NODES}  # the open node's default entries
    assert set(FIELDS) == set(KNOWN_KEYS) - entries and set(OPEN_NODES) == {"trainer.learning_rate"}


def test_the_defaults_are_what_loads_without_a_yaml():
    loaded = section(load_config(None), sections.ConfigSections)
    assert loaded.output_dir == "runs/dit4dit_run"  # derived when the config loads
    assert dataclasses.replace(loaded, output_dir=None) == sections.ConfigSections()
    assert loaded.trainer.learning_rate == {"base": 1e-4, "backbone_interface": 1e-5, "action_model": 1e-4}


def test_every_literal_is_enforced_with_its_choices():
    literals = {path: parts for path, parts in FIELDS.items() if parts[3]}
    assert len(literals) >= 14 and "trackers" in literals and "wandb_mode" in literals
    for path, (_, is_list, _, choices) in literals.items():
        for choice in choices:
            given = [choice] if is_list else choice
            assert coerce(path, KNOWN_KEYS[path], given)[0] == given
        bad = "[no_such_choice]" if is_list else "no_such_choice"
        with pytest.raises(ConfigError, match=rf"^{path}: 'no_such_choice' is not one of {', '.join(choices)}$"):
            load_config(ROBOTWIN, [f"{path}={bad}"])


def test_null_is_allowed_exactly_where_the_annotation_says():
    assert sum(nullable for _, _, nullable, _ in FIELDS.values()) >= 10
    for path, (_, _, nullable, _) in FIELDS.items():
        if nullable:
            assert coerce(path, KNOWN_KEYS[path], None) == (None, None)
        else:
            with pytest.raises(ConfigError, match=rf"^{path}: cannot be null; set a value"):
                coerce(path, KNOWN_KEYS[path], None)


# A value of the wrong type for each annotation, and what loading says about it.
WRONG = {bool: ("maybe", "expected true or false"), int: ("ten", "expected a number"),
         float: ("ten", "expected a number"), str: (True, "expected text")}


def test_each_key_takes_its_annotations_type():
    for path, (scalar, is_list, _, _) in FIELDS.items():
        value, message = ("7", "expected a list") if is_list else WRONG[scalar]
        with pytest.raises(ConfigError, match=rf"^{path}: {message}"):
            coerce(path, KNOWN_KEYS[path], value)
    assert load_config(ROBOTWIN, ["trainer.learning_rate.my_adapter=3"]).trainer.learning_rate.my_adapter == 3.0


def test_an_annotation_loading_cannot_check_is_refused():
    with pytest.raises(TypeError, match=r"a\.b: a config key is bool, int, float, str, a Literal or a list of them"):
        declared("a.b", dict[str, int], Key({}, "a mapping"))


def test_a_loaded_config_fills_its_sections_frozen():
    cfg = load_config(ROBOTWIN, ["trainer.learning_rate.action_model=3e-4"])
    whole = section(cfg, sections.ConfigSections)
    trainer = section(cfg.trainer, sections.TrainerSection)
    assert whole.trainer == trainer
    assert trainer.learning_rate["action_model"] == 3e-4 and trainer.optimizer.betas == [0.9, 0.95]
    assert whole.datasets.vla_data.per_device_batch_size == cfg.datasets.vla_data.per_device_batch_size
    assert whole.framework.cosmos25.flow_matching.high_sigma_min == 0.98
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainer.max_train_steps = 1


def test_frame_subsampling_has_one_home():
    """DatasetsVlaDataSection.frame_offsets is the one subsampling of video_delta_indices: the data's sample shape,
    the model's frame count and the synthetic examples all follow it."""
    from DiT4DiT.dataloader.build import sample_shape
    from DiT4DiT.tools.synthetic_inputs import make_examples

    cfg = load_config(ROBOTWIN, ["datasets.vla_data.video_delta_indices=[0,2,4,6,8,10,12]",
                                 "datasets.vla_data.action_video_freq_ratio=3"])
    vla = cfg.datasets.vla_data
    assert vla.frame_offsets == (0, 6, 12) and vla.num_frames == 3
    assert sample_shape(vla, 8).video_offsets == vla.frame_offsets
    assert len(make_examples(cfg, batch=1)[0]["image"]) == vla.num_frames


def test_views_auto_resolves_in_one_place():
    """datasets.vla_data.views=auto: training (dataloader/build.py) and serving (serving/layout.py) resolve it with
    the one rule, data_configs.auto_views."""
    import inspect

    from DiT4DiT.dataloader import build
    from DiT4DiT.dataloader.data_configs import auto_views
    from DiT4DiT.serving import layout

    assert auto_views({}, ValueError) == "side_by_side"
    assert auto_views({"as_frames": "a"}, ValueError) == "as_frames"
    with pytest.raises(ValueError, match="a: as_frames, b: side_by_side"):
        auto_views({"side_by_side": "b", "as_frames": "a"}, ValueError)
    for resolver in (build._views, layout.implied_layout):
        assert "auto_views(" in inspect.getsource(resolver)


def test_the_evaluation_device_choices_are_the_device_kinds():
    from DiT4DiT.facts import DEVICE_KINDS

    assert set(typing.get_args(sections.EvaluationDevice)) == {"auto", *DEVICE_KINDS}
