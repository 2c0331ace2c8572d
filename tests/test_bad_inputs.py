"""Bad config inputs, one table row each: a one-line error naming the key and the fix, exit 2, nothing written.

Add a case by adding a row (tests/helpers/bad_inputs.py explains the columns).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from DiT4DiT.facts import PIPELINE_PARTS
from helpers.bad_inputs import BadInput, check_bad_input

DOWNLOAD = "huggingface-cli download nvidia/Cosmos-Predict2.5-2B --revision diffusers/base/post-trained --local-dir"


def _file(name):
    return lambda tmp: (tmp / name).write_text("not a folder")


def _yaml(text):
    return lambda tmp: (tmp / "bad.yaml").write_text(text)


def _model_without(name):
    def prepare(tmp):
        target = tmp / "model" / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    return prepare


def _model_of_class(name):
    return lambda tmp: (tmp / "model" / "model_index.json").write_text(json.dumps({"_class_name": name}))


def _truncated_weights(tmp):
    shard = tmp / "model" / "transformer" / "diffusion_pytorch_model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-8])


def _laughs(name):
    """Anchors nested 9 deep, 10 aliases each: 10^9 values once expanded, a few hundred bytes of text."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return lambda tmp: (tmp / name).write_text("\n".join(lines) + "\n")


def _sparse(name, size=3 * 2**30):
    def prepare(tmp):
        with open(tmp / name, "wb") as file:
            file.truncate(size)  # no blocks on disk
    return prepare


def _binary(name):
    return lambda tmp: (tmp / name).write_bytes(bytes(range(256)) * 4)


def _mixture(text):
    return lambda tmp: (tmp / "mix.yaml").write_text(text)


def _link_loop(tmp):
    os.symlink(tmp / "loop_b", tmp / "loop_a")
    os.symlink(tmp / "loop_a", tmp / "loop_b")


def _link_outside(tmp):
    (tmp / "outside").mkdir()
    (tmp / "runs").mkdir()
    os.symlink(tmp / "outside", tmp / "runs" / "escape")


def _mixture_naming_twice(tmp):
    (tmp / "set/meta").mkdir(parents=True)
    (tmp / "set/meta/info.json").write_text("{}")
    (tmp / "mix.yaml").write_text("- {path: set, weight: 1.0}\n- {path: ./set/, weight: 0.5}\n")


ROWS = [
    BadInput("run id going up", ("--run_id=../escaped_run",), 2, ("run_id '../escaped_run'", "'/'", "one path component")),
    BadInput("run id dot", ("--run_id=.",), 2, ("run_id '.'", "one path component")),
    BadInput("run id dot dot", ("--run_id=..",), 2, ("run_id '..'", "one path component")),
    BadInput("run id backslash", ("--run_id=a\\b",), 2, ("run_id 'a\\\\b'", "one path component")),
    BadInput("run id with a nul", ("--config_yaml={tmp}/bad.yaml",), 2, ("run_id 'a\\x00b'", "one path component"),
             _yaml('run_id: "a\\0b"\n')),
    BadInput("nul on the command line", ("--run_id=a\0b",), 2, ("command line", "not valid YAML", "control characters")),
    BadInput("yaml that does not parse", ("--config_yaml={tmp}/bad.yaml",), 2, ("bad.yaml, line 2", "not valid YAML"),
             _yaml("run_id: a\n  - b: [\n")),
    BadInput("run id empty", ("--run_id=''",), 2, ("run_id ''", "one path component")),
    BadInput("run id through a link", ("--run_id=escape",), 2, ("run_id 'escape'", "outside run_root_dir"),
             _link_outside),
    BadInput("scheduler misspelled", ("--trainer.lr_scheduler_type=cosine_with_minlr",), 2,
             ("trainer.lr_scheduler_type", "'cosine_with_minlr' is not one of", "did you mean 'cosine_with_min_lr'")),
    BadInput("scheduler that needs a metric", ("--trainer.lr_scheduler_type=reduce_lr_on_plateau",), 2,
             ("trainer.lr_scheduler_type", "is not one of")),
    BadInput("mixture file naming a dataset twice", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml, entries 1 and 2", "both name the dataset", "give it once", "1 + 0.5 = 1.5"),
             _mixture_naming_twice),
    BadInput("seed too large", ("--seed=4294967296",), 2, ("seed", "at most 4294967295")),
    # The data keys against the data registry (DiT4DiT/dataloader/config_checks.py), before any dataset is read.
    BadInput("data config misspelled", ("--datasets.vla_data.data_config=robotwn",), 2,
             ("datasets.vla_data.data_config='robotwn' is not a data config", "use one of robotwin")),
    BadInput("data config wider than max_state_dim", ("--datasets.vla_data.data_mix={tmp}/data",
             "--datasets.vla_data.data_config=fourier_gr1_arms_waist"), 2,
             ("data config 'fourier_gr1_arms_waist' gives", "more than datasets.vla_data.max_state_dim=14",
              "set it to at least")),
    BadInput("data config with another action chunk", ("--datasets.vla_data.data_mix={tmp}/data",
             "--datasets.vla_data.data_config=robotwin50"), 2,
             ("data config 'robotwin50'", "fixes the action chunk at 50 steps",
              "framework.action_model.future_action_window_size=49")),
    BadInput("cache dir is a file", ("--datasets.vla_data.cache_dir={tmp}/cache",), 2,
             ("datasets.vla_data.cache_dir", "cache' is a file", "point it at a folder"), _file("cache")),
    BadInput("cache dir below a file", ("--datasets.vla_data.cache_dir={tmp}/cache/sub",), 2,
             ("datasets.vla_data.cache_dir", "cache' is a file", "in the path"), _file("cache")),
    BadInput("interpolation to a missing key", ("--config_yaml={tmp}/bad.yaml",), 2,
             ("run_id", "trainer.no_such_key", "not found", "must name a config key"),
             _yaml("run_id: ${trainer.no_such_key}\n")),
    BadInput("interpolation on the command line", ("--run_id=${nowhere}",), 2, ("run_id", "'nowhere' not found")),
    BadInput("missing base model", ("--framework.cosmos25.base_model={tmp}/nowhere",), 2,
             ("framework.cosmos25.base_model", "does not exist")),
    BadInput("base model unset", ("--framework.cosmos25.base_model=null",), 2,
             ("framework.cosmos25.base_model is not set", DOWNLOAD, "python -m DiT4DiT.tools.tiny_cosmos")),
    # Bounded inputs: YAML with a size cap and a node limit, values with a range and its reason.
    BadInput("config of nested anchors", ("--config_yaml={tmp}/bad.yaml",), 2,
             ("bad.yaml: expands to more than 200,000 values", "anchors and aliases"), _laughs("bad.yaml")),
    BadInput("config of 3 GB (sparse)", ("--config_yaml={tmp}/bad.yaml",), 2,
             ("bad.yaml: 3,221,225,472 bytes, more than the 4 MiB",), _sparse("bad.yaml")),
    BadInput("config that is a binary file", ("--config_yaml={tmp}/bad.yaml",), 2,
             ("bad.yaml: a binary file (it holds NUL bytes)",), _binary("bad.yaml")),
    BadInput("config that is not UTF-8", ("--config_yaml={tmp}/bad.yaml",), 2, ("bad.yaml: not UTF-8 text",),
             lambda tmp: (tmp / "bad.yaml").write_bytes(b"run_id: caf\xe9\n")),
    BadInput("config that is a YAML list", ("--config_yaml={tmp}/bad.yaml",), 2,
             ("bad.yaml: the file is a list", "a config file is a mapping"), _yaml("- run_id: a\n")),
    BadInput("config nested too deeply", ("--config_yaml={tmp}/bad.yaml",), 2, ("bad.yaml: nested too deeply",),
             _yaml("[" * 100_000)),
    BadInput("mixture file of nested anchors", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml: expands to more than 200,000 values",), _laughs("mix.yaml")),
    # Refused before with "expands to more than 200,000 values (anchors and aliases ...?)": now a stated bound.
    BadInput("mixture file of 100,000 entries", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml: more than 10,000 entries; a mixture file holds at most 10,000", "every start indexes each dataset"),
             _mixture("".join(f"- {{path: d{i}}}\n" for i in range(100_000)))),
    # A recursive anchor: the node counter recursed until RecursionError, a traceback.
    BadInput("config with a recursive anchor", ("--config_yaml={tmp}/bad.yaml",), 2,
             ("bad.yaml: an anchor is used inside its own value", "write the values out plainly"),
             _yaml("a: &b [*b]\n")),
    BadInput("mixture file with a recursive anchor", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml: an anchor is used inside its own value", "mixture file never ends"),
             _mixture("- &b {path: a, weight: [*b]}\n")),
    BadInput("mixture file of 3 GB (sparse)", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml: 3,221,225,472 bytes", "mixture file"), _sparse("mix.yaml")),
    BadInput("mixture file that is a binary file", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml: a binary file", "not a mixture file"), _binary("mix.yaml")),
    BadInput("mixture weight .inf", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml, entry 1: weight inf must be a positive number up to 1000",), _mixture("- {path: a, weight: .inf}\n")),
    BadInput("mixture weight that overflows", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("entry 1: weight 1e+308 must be a positive number up to 1000",), _mixture("- {path: a, weight: 1.0e+308}\n")),
    BadInput("mixture entry with an unknown data config", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml, entry 1: data_config 'robotwn' is not a data config", "did you mean 'robotwin'?"),
             _mixture("- {path: a, data_config: robotwn}\n")),
    BadInput("prompt length 1e8", ("--framework.cosmos25.max_sequence_length=1e8",), 2,
             ("framework.cosmos25.max_sequence_length: must be at most 4096, got 100000000", "the original uses 512")),
    BadInput("steps 1e30", ("--trainer.max_train_steps=1e30",), 2,
             ("trainer.max_train_steps: must be at most 100000000, got 1e+30", "three years")),
    BadInput("accumulation 1e5", ("--trainer.gradient_accumulation_steps=1e5",), 2,
             ("trainer.gradient_accumulation_steps: must be at most 1024", "micro-batches in memory")),
    BadInput("collective timeout 1e30", ("--trainer.collective_timeout_s=1e30",), 2,
             ("trainer.collective_timeout_s: must be at most 86400, got 1e+30", "a day")),
    BadInput("stall timeout 1e30", ("--trainer.stall_timeout_s=1e30",), 2,
             ("trainer.stall_timeout_s: must be at most 86400", "a day")),
    BadInput("seed 1e20", ("--seed=1e20",), 2, ("seed: must be at most 4294967295, got 1e+20",)),
    BadInput("run id of 300 characters", ("--run_id=" + "r" * 300,), 2,
             ("run_id of 300 characters", "at most 255 bytes", "shorter --run_id")),
    BadInput("run root dir a link loop", ("--run_root_dir={tmp}/loop_a",), 2,
             ("run_root_dir:", "loop_a cannot be resolved", "symbolic link loop"), _link_loop),
    BadInput("data root a link loop", ("--datasets.vla_data.data_root_dir={tmp}/loop_a",), 2,
             ("datasets.vla_data.data_root_dir", "loop_a"), _link_loop),
    BadInput("base model a link loop", ("--framework.cosmos25.base_model={tmp}/loop_a",), 2,
             ("framework.cosmos25.base_model", "loop_a"), _link_loop),
    BadInput("data mix a link loop", ("--datasets.vla_data.data_mix={tmp}/loop_a",), 2,
             ("datasets.vla_data.data_mix: ", "loop_a cannot be resolved"), _link_loop),
    BadInput("mixture entry a link loop", ("--datasets.vla_data.data_mix={tmp}/mix.yaml",), 2,
             ("mix.yaml, entry 1: path: ", "loop_a cannot be resolved"),
             lambda tmp: (_link_loop(tmp), _mixture("- {path: loop_a}\n")(tmp))),
    BadInput("workers 1e5", ("--datasets.vla_data.num_workers=100000",), 2,
             ("datasets.vla_data.num_workers: must be at most 64", "a process")),
]

# A copy of the tiny pipeline at {tmp}/model, broken by the row or not matching its keys: found when the config
# loads, not by the model.
def _transformer_config(**changes):
    def prepare(tmp):
        path = tmp / "model" / "transformer" / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return prepare


MODEL_FOLDER_ROWS = [
    # The model is built at the config's sizes before its weights load: 100,000 blocks allocated past 4 GB first
    # (the trainer's resource estimate happened to refuse it; the server and the doctor did not).
    BadInput("transformer config of 100,000 blocks", (), 2,
             ("transformer/config.json: num_layers says 100000, but its weights hold 4 transformer blocks",
              "does not belong to these weights"), _transformer_config(num_layers=100_000)),
    BadInput("transformer config wider than its weights", (), 2,
             ("num_attention_heads x attention_head_dim says 4096, but its weights hold 32 channels wide",),
             _transformer_config(num_attention_heads=256)),
    BadInput("extract layer beyond the transformer", ("--framework.cosmos25.extract_layer=4",), 2,
             ("framework.cosmos25.extract_layer=4 is out of range", "4 blocks", "valid range is 0..3")),
    BadInput("backbone width not the transformer's", ("--framework.cosmos25.vl_hidden_dim=2048",
             "--framework.action_model.diffusion_model_cfg.cross_attention_dim=2048"), 2,
             ("framework.cosmos25.vl_hidden_dim=2048", "is 32 wide", "set vl_hidden_dim to 32")),
    BadInput("video mode without future frames", ("--framework.cosmos25.training=video",
             "--datasets.vla_data.video_delta_indices=[0]"), 2,
             ("framework.cosmos25.training=video needs at least 5 frames per sample", "give 1")),
    BadInput("joint mode without future frames", ("--datasets.vla_data.video_delta_indices=[0]",), 2,
             ("framework.cosmos25.training=joint needs at least 5 frames per sample", "give 1",
              "set framework.cosmos25.training=action")),
    BadInput("base model folder missing", ("--framework.cosmos25.base_model={tmp}/nowhere",), 2,
             ("framework.cosmos25.base_model: folder '", "nowhere' does not exist", f"fix: {DOWNLOAD} ")),
    BadInput("no model_index.json", (), 2, ("not a diffusers pipeline folder", "model_index.json is missing", DOWNLOAD),
             _model_without("model_index.json")),
    *(BadInput(f"no {part} component", (), 2, (f"is incomplete: component '{part}' ({part}/{marker}) is missing",
                                                DOWNLOAD), _model_without(part)) for part, marker in PIPELINE_PARTS.items()),
    BadInput("another pipeline", (), 2, ("holds a 'WanPipeline' pipeline, not Cosmos2_5_PredictBasePipeline", DOWNLOAD),
             _model_of_class("WanPipeline")),
    BadInput("truncated weights", (), 2, ("diffusion_pytorch_model.safetensors", "but its header describes",
                                          f"fix: delete it, then {DOWNLOAD}"), _truncated_weights),
]


def _garbage(name):
    return lambda tmp: (tmp / name).write_bytes(b"not a checkpoint\n" * 64)


def _weights(tmp):
    import torch

    torch.save({"action_model.no_such.weight": torch.zeros(2)}, tmp / "weights.pt")


# Checks made once the data and the model are built (the tiny pipeline and tiny RoboTwin data): before, they fired
# after config.yaml and dataset_statistics.json were written, and the folder refused a fresh start and a resume.
LATE_ROWS = [
    BadInput("learning rate for a module the model lacks", ("--trainer.learning_rate.no_such_module=1e-3",), 2,
             ("trainer.learning_rate.no_such_module", "the model has no module 'no_such_module'")),
    BadInput("freezing a module the model lacks", ("--trainer.freeze_modules=backbone_interface.no_such",), 2,
             ("trainer.freeze_modules", "no module 'backbone_interface.no_such'")),
    BadInput("reloading a module the checkpoint lacks", ("--trainer.pretrained_checkpoint={tmp}/weights.pt",
             "--trainer.reload_modules=backbone_interface"), 2,
             ("trainer.reload_modules", "weights.pt holds no weights under ['backbone_interface']"), _weights),
    BadInput("framework not registered", ("--framework.name=QwenGR00T",), 2, ("framework.name", "QwenGR00T")),
    BadInput("garbage pretrained checkpoint", ("--trainer.pretrained_checkpoint={tmp}/weights.pt",), 2,
             ("trainer.pretrained_checkpoint", "weights.pt is not a weights file"), _garbage("weights.pt")),
    # A pickle whose first op stores an empty stack: the unpickler raised IndexError, a traceback.
    BadInput("pretrained checkpoint that breaks the unpickler", ("--trainer.pretrained_checkpoint={tmp}/weights.pt",), 2,
             ("trainer.pretrained_checkpoint", "weights.pt is not a weights file (IndexError"),
             lambda tmp: (tmp / "weights.pt").write_bytes(b"q\x00.")),
]


@pytest.mark.parametrize("case", ROWS, ids=str)
def test_a_bad_input_is_one_line_and_nothing_is_written(case, tmp_path, capsys):
    check_bad_input(case, tmp_path, capsys)


@pytest.mark.parametrize("case", MODEL_FOLDER_ROWS, ids=str)
def test_a_broken_base_model_is_refused_with_the_config(case, tiny_pipeline_dir, tmp_path, capsys):
    shutil.copytree(tiny_pipeline_dir, tmp_path / "model")
    check_bad_input(case, tmp_path, capsys, base_model=tmp_path / "model")


def test_a_good_run_id_is_the_run_folder():
    from DiT4DiT.config.schema import load_config

    cfg = load_config("DiT4DiT/config/tiny/dit4dit_tiny.yaml", ["run_root_dir=/tmp/runs", "run_id=my_run.v2"])
    assert cfg.output_dir == "/tmp/runs/my_run.v2"


@pytest.mark.parametrize("case", LATE_ROWS, ids=str)
def test_a_check_made_once_the_model_is_built_writes_nothing(case, tiny_pipeline_dir, tiny_robotwin_root, tmp_path,
                                                              capsys):
    check_bad_input(case, tmp_path, capsys, base_model=tiny_pipeline_dir, data_root=tiny_robotwin_root)


def test_a_mixture_file_at_the_entry_bound_is_read(tmp_path):
    from DiT4DiT.config.errors import ConfigError
    from DiT4DiT.dataloader.mixtures import MAX_ENTRIES
    from DiT4DiT.yaml_files import checked_yaml_text

    at_bound = tmp_path / "mix.yaml"
    at_bound.write_text("".join(f"- {{path: d{i}, weight: 1.0}}\n" for i in range(MAX_ENTRIES[0])))
    assert checked_yaml_text(at_bound, ConfigError, "mixture file", max_entries=MAX_ENTRIES)
