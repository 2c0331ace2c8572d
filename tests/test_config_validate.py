"""DiT4DiT/config/validate.py on its own: each rule between keys, called with a typed config loaded from the tiny
YAML and then broken one key at a time (config/typed.py `replaced`), so a rule is checked by the function itself,
not only through load_config (tests/test_config.py checks that loading runs them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.schema import load_config
from DiT4DiT.config.typed import replaced
from DiT4DiT.config.validate import (
    MAX_NAME_BYTES, action_chunk, check_action_dims, check_backbone_fits, check_rules, has_action_head,
    latent_cache_refusal, profiled_steps, run_dir_of,
)
from DiT4DiT.facts import VAE_MODULE
from helpers.fixtures_model import TINY_YAML


@pytest.fixture(scope="module")
def tiny():
    return load_config(TINY_YAML, [])


def broken(cfg, *changes: tuple[str, object]):
    for path, value in changes:
        cfg = replaced(cfg, path, value)
    return cfg


def refused(words: str):
    return pytest.raises(ConfigError, match=re.escape(words))


@pytest.mark.parametrize("training, head, chunk", [("joint", True, 8), ("action", True, 8), ("video", False, None)])
def test_the_action_head_and_its_chunk_follow_the_training_mode(tiny, training, head, chunk):
    cfg = broken(tiny, ("framework.cosmos25.training", training))
    assert (has_action_head(cfg), action_chunk(cfg)) == (head, chunk)


def test_the_chunk_is_the_window_plus_the_current_step(tiny):
    cfg = broken(tiny, ("framework.action_model.future_action_window_size", 3))
    assert action_chunk(cfg) == 4


def test_the_head_is_built_at_the_padded_widths(tiny):
    check_action_dims(tiny)
    check_action_dims(broken(tiny, ("framework.action_model.state_dim", 0)))  # no state
    with refused("framework.action_model.action_dim=7 must equal datasets.vla_data.max_action_dim=14 (actions are "
                 "padded to that width)"):
        check_action_dims(broken(tiny, ("framework.action_model.action_dim", 7)))
    with refused("framework.action_model.state_dim=14 must equal datasets.vla_data.max_state_dim=16 (or 0 for no "
                 "state)"):
        check_action_dims(broken(tiny, ("datasets.vla_data.max_state_dim", 16)))


def test_a_run_id_is_one_folder_inside_the_run_root(tmp_path):
    assert run_dir_of(str(tmp_path), "my_run_01") == tmp_path / "my_run_01"
    assert run_dir_of("runs", "r") == Path("runs", "r")  # relative roots stay relative
    assert run_dir_of(str(tmp_path), "é" * (MAX_NAME_BYTES // 2)) == tmp_path / ("é" * (MAX_NAME_BYTES // 2))


NO_FOLDER = "it names no folder of its own"


@pytest.mark.parametrize("run_id, reason", [("", NO_FOLDER), (".", NO_FOLDER), ("..", NO_FOLDER),
                                            ("a/b", "it contains '/'"), ("../up", "it contains '/'"),
                                            ("a\\b", "it contains '\\\\'"), ("a\0b", "it contains '\\x00'")])
def test_a_run_id_that_is_no_folder_name_is_refused(tmp_path, run_id, reason):
    with refused(f"run_id {run_id!r} is not a folder name ({reason}); a run id is one path component such as "
                 "my_run_01 (choose the parent folder with --run_root_dir)"):
        run_dir_of(str(tmp_path), run_id)


def test_a_run_id_longer_than_a_folder_name_can_be_is_refused_by_its_bytes(tmp_path):
    # 128 two-byte characters: within 255 characters, over 255 bytes.
    with refused(f"run_id of 128 characters (256 bytes): a folder name is at most {MAX_NAME_BYTES} bytes on Linux "
                 "file systems; pick a shorter --run_id"):
        run_dir_of(str(tmp_path), "é" * 128)


def test_a_run_id_that_leads_out_of_the_run_root_through_a_link_is_refused(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runs" / "escape").symlink_to(tmp_path / "elsewhere")
    with refused(f"run_id 'escape': {tmp_path / 'runs' / 'escape'} resolves to {tmp_path / 'elsewhere'}, outside "
                 f"run_root_dir {tmp_path / 'runs'} (a symbolic link?); pick another --run_id"):
        run_dir_of(str(tmp_path / "runs"), "escape")


def test_a_link_loop_on_the_way_is_named(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with refused(f"run_root_dir: {tmp_path / 'loop'} cannot be resolved"):
        run_dir_of(str(tmp_path / "loop"), "r")


@pytest.mark.parametrize("text, steps", [(None, None), ("", None), ("  ", None), ("10", (10, 10)), ("10,12", (10, 12)),
                                         (" 3 , 4 ", (3, 4)), ("7,7", (7, 7))])
def test_profiled_steps_are_first_and_last(text, steps):
    assert profiled_steps(text) == steps


@pytest.mark.parametrize("text", ["ten", "1,2,3", "1;2", "10,", "-1", "1.5", "²", "١٢"])
def test_profiled_steps_that_are_not_one_or_two_steps_are_refused(text):
    with refused(f"trainer.profile_steps={text!r}: give the first and last optimizer step to profile, e.g. 10,12 (or "
                 "one step, e.g. 10)"):
        profiled_steps(text)


@pytest.mark.parametrize("text", ["0", "0,3", "5,3"])
def test_profiled_steps_count_from_one_in_order(text):
    with refused(f"trainer.profile_steps={text!r}: steps count from 1, and the first comes first"):
        profiled_steps(text)


def test_the_latent_store_holds_a_frozen_vaes_latents_only(tiny):
    assert latent_cache_refusal(tiny) is None  # the tiny config freezes the VAE
    assert latent_cache_refusal(broken(tiny, ("trainer.freeze_modules", "backbone_interface.extractor"))) is None
    for freeze in ("backbone_interface.extractor.text_encoder", "backbone_interface.extractor.va", None):
        assert latent_cache_refusal(broken(tiny, ("trainer.freeze_modules", freeze))) == (
            "framework.cosmos25.latent_cache needs a frozen VAE (a stored posterior carries no gradient): add "
            f"{VAE_MODULE} to trainer.freeze_modules, or set latent_cache=false")


@pytest.mark.parametrize("training, refusal", [("joint", True), ("video", True), ("action", False)])
def test_the_latent_store_refuses_a_loss_on_decoded_pixels_where_the_video_is_trained(tiny, training, refusal):
    cfg = broken(tiny, ("framework.cosmos25.training", training), ("framework.cosmos25.future_loss_type", "pixel_mse"))
    assert latent_cache_refusal(cfg) == (
        "framework.cosmos25.latent_cache: future_loss_type=pixel_mse compares decoded frames with the video's pixels, "
        "which the store does not hold; use a latent loss (flow_matching, latent_mse) or set latent_cache=false"
        if refusal else None)


RULES = [  # (changes to the tiny config, the start of the error)
    ((("framework.action_model.action_dim", 7),), "framework.action_model.action_dim=7 must equal"),
    ((("framework.action_model.action_horizon", 16),),
     "framework.action_model.action_horizon (16) must equal future_action_window_size + 1 (8): the eval compares"),
    ((("framework.action_model.diffusion_model_cfg.cross_attention_dim", 64),),
     "framework.action_model.diffusion_model_cfg.cross_attention_dim=64 must equal framework.cosmos25.vl_hidden_dim=32 "
     "(the DiT attends to the backbone features)"),
    ((("framework.action_model.hidden_size", 32),),
     "framework.action_model.diffusion_model_cfg.output_dim=64 must equal framework.action_model.hidden_size=32 (the "
     "action decoder reads the DiT output)"),
    ((("framework.action_model.max_seq_len", 4),),
     "framework.action_model.max_seq_len=4 is shorter than the action chunk (8); raise it"),
    ((("framework.action_model.diffusion_model_cfg.attention_head_dim", None),),
     "num_attention_heads and attention_head_dim override the size table together: set both or neither"),
    ((("framework.action_model.diffusion_model_cfg.positional_embeddings", "sinusoidal"),),
     "framework.action_model.diffusion_model_cfg.positional_embeddings: only null is supported"),
    ((("framework.action_model.rtc_training.enabled", True), ("framework.action_model.rtc_training.max_delay", 8)),
     "framework.action_model.rtc_training.max_delay=8 must be below the action chunk (8 steps): a delay of the whole "
     "chunk leaves nothing to predict; lower it (at most 4 keeps"),
    ((("framework.cosmos25.flow_matching.high_sigma_min", None),),
     "framework.cosmos25.flow_matching.high_sigma_min is null but high_sigma_ratio=0.05; set high_sigma_min (e.g. "
     "0.98) or set high_sigma_ratio to null"),
    ((("datasets.vla_data.image_size", 40),),
     "datasets.vla_data.image_size=40: Cosmos needs frame sides that are multiples of 16; use e.g. 32"),
    ((("datasets.vla_data.image_size", 8),), "multiples of 16; use e.g. 16"),
    ((("datasets.vla_data.video_delta_indices", []),),
     "datasets.vla_data.video_delta_indices: give at least one frame offset"),
    ((("trainer.gradient_checkpointing_blocks", "some"),),
     "trainer.gradient_checkpointing_blocks='some': give a count of blocks (e.g. 14), auto (the fewest the memory plan "
     "needs on this device) or null"),
    ((("trainer.gradient_checkpointing_blocks", "²"),), "trainer.gradient_checkpointing_blocks='²': give a count"),
    ((("trainer.profile_steps", "90,120"),),
     "trainer.profile_steps=90,120: the run ends at step 100; profile steps within it"),
    ((("trainer.profile_steps", "x"),), "trainer.profile_steps='x': give the first and last optimizer step"),
    ((("framework.cosmos25.latent_cache", True), ("trainer.freeze_modules", "")),
     "framework.cosmos25.latent_cache needs a frozen VAE"),
    ((("trainer.is_resume", True), ("trainer.pretrained_checkpoint", "/w.pt")),
     "trainer.is_resume and trainer.pretrained_checkpoint are both set: resume continues this run's own training "
     "state; unset one of them"),
    ((("trainer.resume_weights_only", True),),
     "trainer.resume_weights_only only applies with --trainer.is_resume true"),
    ((("trainer.is_resume", True), ("trainer.move_old_run", True)),
     "trainer.move_old_run and trainer.is_resume are both set: resume continues the run in the run dir, move_old_run "
     "starts a new one there; unset one of them"),
]


def test_the_tiny_config_keeps_every_rule(tiny):
    check_rules(tiny)
    check_rules(broken(tiny, ("trainer.gradient_checkpointing_blocks", "auto"), ("trainer.profile_steps", "99,100"),
                       ("framework.cosmos25.latent_cache", True), ("trainer.is_resume", True),
                       ("trainer.resume_weights_only", True), ("framework.action_model.rtc_training.enabled", True),
                       ("framework.action_model.rtc_training.max_delay", 7)))


@pytest.mark.parametrize("changes, words", RULES, ids=[changes[-1][0].rsplit(".", 1)[1] for changes, _ in RULES])
def test_each_broken_rule_is_named_with_its_fix(tiny, changes, words):
    with refused(words):
        check_rules(broken(tiny, *changes))


@pytest.mark.parametrize("changes", [(("framework.action_model.action_dim", 7),),
                                     (("framework.action_model.action_horizon", 16),),
                                     (("framework.action_model.rtc_training.enabled", True),
                                      ("framework.action_model.rtc_training.max_delay", 8))])
def test_a_video_only_run_has_no_action_head_to_check(tiny, changes):
    check_rules(broken(tiny, ("framework.cosmos25.training", "video"), *changes))


def test_a_rtc_delay_is_checked_only_when_rtc_trains(tiny):
    check_rules(broken(tiny, ("framework.action_model.rtc_training.max_delay", 8)))


def test_the_tiny_backbone_fits_the_tiny_pipeline(tiny_model_cfg):
    check_backbone_fits(tiny_model_cfg())
    check_backbone_fits(tiny_model_cfg("trainer.gradient_checkpointing_blocks=auto"))
    check_backbone_fits(tiny_model_cfg("trainer.gradient_checkpointing_blocks=4", "framework.cosmos25.extract_layer=0"))


@pytest.mark.parametrize("changes, words", [
    ((("framework.cosmos25.extract_layer", 4),),
     "framework.cosmos25.extract_layer=4 is out of range: the transformer has 4 blocks, so the valid range is 0..3"),
    ((("framework.cosmos25.extract_layer", -1),), "extract_layer=-1 is out of range"),
    ((("framework.cosmos25.vl_hidden_dim", 64),),
     "framework.cosmos25.vl_hidden_dim=64 but the transformer in {base} is 32 wide; set vl_hidden_dim to 32"),
    ((("trainer.gradient_checkpointing_blocks", "5"),),
     "trainer.gradient_checkpointing_blocks=5: the transformer in {base} has 4 blocks; give at most 4"),
    ((("datasets.vla_data.video_delta_indices", [0, 1, 2, 3]),),  # 2 frames; the tiny VAE takes 1 + 4k
     "framework.cosmos25.training=joint needs at least 5 frames per sample (its video loss predicts the frames after "
     "the first), but datasets.vla_data.video_delta_indices / action_video_freq_ratio give 2; to train the action "
     "head alone on one frame, set framework.cosmos25.training=action"),
])
def test_backbone_keys_that_do_not_fit_the_pipeline_name_its_size(tiny_model_cfg, changes, words):
    cfg = broken(tiny_model_cfg(), *changes)
    with refused(words.format(base=cfg.framework.cosmos25.base_model)):
        check_backbone_fits(cfg)


def test_too_few_frames_for_the_video_loss_suggest_action_training_only_to_joint_runs(tiny_model_cfg):
    one_frame = ("datasets.vla_data.video_delta_indices", [0])
    with pytest.raises(ConfigError) as video:
        check_backbone_fits(broken(tiny_model_cfg(), one_frame, ("framework.cosmos25.training", "video")))
    assert str(video.value).endswith("give 1")
    check_backbone_fits(broken(tiny_model_cfg(), one_frame, ("framework.cosmos25.training", "action")))
