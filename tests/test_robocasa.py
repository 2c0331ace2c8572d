"""RoboCasa's entry point (`python -m DiT4DiT.evaluation.robocasa`) against the real server: a setting the served
chunk cannot honour, or a server that needs a token, is one line on stderr and an exit status, checked before any
simulator is imported. (The adapter's stepping is tested in test_evaluation.py with fake environments.)"""

from __future__ import annotations

import pytest

from DiT4DiT.evaluation.robocasa import main
from DiT4DiT.serving import wire
from DiT4DiT.serving.server import running_server

CHUNK = 8  # the tiny run's action chunk


def run_robocasa(port: int, *options: str, out) -> int:
    return main(["--port", str(port), "--env_names", "gr1_unified/PnPMilk", "--out", str(out), *options])


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    return line


@pytest.fixture(scope="module")
def server(tiny_policy):
    with running_server(tiny_policy) as running:
        yield running


@pytest.mark.parametrize("options, message", [
    (("--n_action_steps", "9"), f"error: --n_action_steps 9: use 1..{CHUNK} (the served chunk length)"),
    (("--n_action_steps", "0"), f"error: --n_action_steps 0: use 1..{CHUNK} (the served chunk length)"),
    (("--n_action_steps", "4", "--ensemble_horizon", "9"),
     f"error: --ensemble_horizon 9: a {CHUNK}-step chunk cannot cover it; use at most {CHUNK}"),
    (("--n_action_steps", "4", "--ensemble_horizon", "-1"),
     "error: --ensemble_horizon -1: blend at least 1 chunk, or pass 0 to execute chunks"),
])
def test_a_setting_the_served_chunk_cannot_honour_is_one_line_and_exit_2(server, options, message, tmp_path, capsys):
    assert run_robocasa(server.port, *options, out=tmp_path / "out") == 2
    assert one_line(capsys) == message
    assert not (tmp_path / "out").exists()


def test_a_server_that_needs_a_token_is_one_line_and_exit_1(tiny_policy, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(wire.TOKEN_ENV, raising=False)
    with running_server(tiny_policy, token="s3cret") as server:
        assert run_robocasa(server.port, "--n_action_steps", "4", out=tmp_path / "out") == 1
    assert one_line(capsys) == (f"error: ws://127.0.0.1:{server.port} requires a token: pass token= or set "
                                f"{wire.TOKEN_ENV}")


def test_with_the_token_a_model_of_another_layout_is_one_line_and_exit_1(tiny_policy, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(wire.TOKEN_ENV, "s3cret")
    with running_server(tiny_policy, token="s3cret") as server:  # the tiny run: RoboTwin's 14-dim actions
        assert run_robocasa(server.port, "--n_action_steps", "4", "--ensemble_horizon", "8", out=tmp_path / "out") == 1
    assert one_line(capsys) == ("error: the served model returns 14-dim actions but the parts ['left_arm', "
                                "'right_arm', 'left_hand', 'right_hand', 'waist'] add up to 29; serve a model trained "
                                "on this robot's layout")
