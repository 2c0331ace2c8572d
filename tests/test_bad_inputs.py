"""Bad config inputs, one table row each: a one-line error naming the key and the fix, exit 2, nothing written.

Add a case by adding a row (tests/helpers/bad_inputs.py explains the columns).
"""

from __future__ import annotations

import os

import pytest

from helpers.bad_inputs import BadInput, check_bad_input


def _file(name):
    return lambda tmp: (tmp / name).write_text("not a folder")


def _yaml(text):
    return lambda tmp: (tmp / "bad.yaml").write_text(text)


def _link_outside(tmp):
    (tmp / "outside").mkdir()
    (tmp / "runs").mkdir()
    os.symlink(tmp / "outside", tmp / "runs" / "escape")


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
    BadInput("seed too large", ("--seed=4294967296",), 2, ("seed", "at most 4294967295")),
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
]


@pytest.mark.parametrize("case", ROWS, ids=str)
def test_a_bad_input_is_one_line_and_nothing_is_written(case, tmp_path, capsys):
    check_bad_input(case, tmp_path, capsys)


def test_a_good_run_id_is_the_run_folder():
    from DiT4DiT.config.schema import load_config

    cfg = load_config("DiT4DiT/config/tiny/dit4dit_tiny.yaml", ["run_root_dir=/tmp/runs", "run_id=my_run.v2"])
    assert cfg.output_dir == "/tmp/runs/my_run.v2"
