"""The VAE latent store: every clip encoded once, the same losses as encoding every step, keyed and checked, and
refused where a stored posterior would be wrong."""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest
import torch

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.model.framework import build_framework
from DiT4DiT.model.freezing import freeze_modules
from DiT4DiT.model.modules.latent_store import LatentStoreError
from DiT4DiT.tools import latent_store as latent_store_tool
from helpers.adamw_steps import step_losses
from helpers.fixtures_data import dataset_of
from helpers.in_process import call_main
from helpers.training_runs import TINY_CONFIG, metrics, train_in_process

SAMPLES = [3, 50, 100, 150]  # items of the tiny mixture, from several episodes and tasks


@pytest.fixture
def store_cfg(tiny_model_cfg, tiny_robotwin_root, tmp_path):
    """tiny_model_cfg reading the tiny RoboTwin set, with the latent store on, under this test's folder."""

    def make(*overrides: str):
        return tiny_model_cfg(f"datasets.vla_data.data_root_dir={tiny_robotwin_root}",
                              f"datasets.vla_data.cache_dir={tmp_path / 'cache'}", "framework.cosmos25.latent_cache=true",
                              f"framework.cosmos25.latent_store_dir={tmp_path / 'latents'}", *overrides)

    return make


def frozen_model(cfg):
    torch.manual_seed(0)
    model = build_framework(cfg)
    freeze_modules(model, cfg.trainer.freeze_modules)
    return model


def count_vae_encodes(model) -> list:
    calls = []
    model.backbone_interface.extractor.vae.encoder.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_stored_posteriors_train_to_the_losses_of_encoding_every_step(store_cfg):
    """Three AdamW steps from the same weights and seeds: with the store (fp32, tiny) the losses equal those of
    decoding and encoding the clips, within 1e-6, and the VAE's encoder never runs once the store is filled."""
    cfg = store_cfg()
    dataset = dataset_of(cfg)
    plain = [dataset[i] for i in SAMPLES]
    model = frozen_model(cfg)
    store = model.prepare_latents([dataset])
    stored = [dataset[i] for i in SAMPLES]
    assert "image" not in stored[0] and set(stored[0]["latents"]) == {"mean", "std"}
    calls = count_vae_encodes(model)
    with_store = step_losses(model, stored)
    assert calls == []
    without = step_losses(frozen_model(cfg), plain)
    torch.testing.assert_close(torch.tensor(with_store), torch.tensor(without), rtol=0, atol=1e-6)
    assert sorted(p.name for p in store.folder.iterdir()) == sorted(
        store.path(e).name for e in dataset.latent_episodes())


def test_a_second_fill_encodes_nothing_and_the_key_follows_the_layout(store_cfg):
    cfg = store_cfg()
    dataset = dataset_of(cfg)
    first = frozen_model(cfg).prepare_latents([dataset])
    model = frozen_model(cfg)
    calls = count_vae_encodes(model)
    again = model.prepare_latents([dataset_of(cfg)])
    assert calls == [] and again.folder == first.folder
    wider = store_cfg("datasets.vla_data.image_size=48")
    other = frozen_model(wider).prepare_latents([dataset_of(wider)])
    assert other.folder != first.folder and other.folder.parent == first.folder.parent


def test_action_mode_stores_the_conditioning_frame_alone(store_cfg):
    cfg = store_cfg("framework.cosmos25.training=action")
    dataset = dataset_of(cfg)
    frozen_model(cfg).prepare_latents([dataset])
    latents = dataset[0]["latents"]
    assert latents["mean"].shape[1] == 1 and latents["std"].shape[1] == 1


def test_a_corrupt_episode_file_is_encoded_again(store_cfg, caplog):
    cfg = store_cfg()
    dataset = dataset_of(cfg)
    store = frozen_model(cfg).prepare_latents([dataset])
    expected = dataset[SAMPLES[1]]["latents"]
    episode = dataset.latent_episodes()[0]
    victim = store.path(episode)
    victim.write_bytes(victim.read_bytes()[:-100])
    model = frozen_model(cfg)
    calls = count_vae_encodes(model)
    fresh = dataset_of(cfg)
    model.prepare_latents([fresh])
    assert f"{victim} is corrupt" in caplog.text and calls
    assert all(torch.equal(fresh[SAMPLES[1]]["latents"][k], expected[k]) for k in expected)


def test_a_row_changed_after_it_was_written_stops_the_run(store_cfg):
    cfg = store_cfg()
    dataset = dataset_of(cfg)
    store = frozen_model(cfg).prepare_latents([dataset])
    episode = dataset.latent_episodes()[0]
    path = store.path(episode)
    data = bytearray(path.read_bytes())
    data[-4:] = torch.tensor([7.0]).view(torch.uint8).numpy().tobytes()  # the last std value: finite, same size
    path.write_bytes(bytes(data))
    reader = copy.copy(store)
    reader._located = {}  # a fresh process's view of the same store: the file is checked when first read
    with pytest.raises(LatentStoreError) as raised:
        reader.posterior(episode.name, episode.rows - 1)
    message = str(raised.value)
    assert message.startswith(f"{path}: the latent store's row {episode.rows - 1} of dataset adjust_bottle episode 0 ")
    assert "its sha256 differs from the one it was written with" in message and "\n" not in message
    assert reader.posterior(episode.name, 0)["mean"].shape[1] == 2  # the other rows are intact


@pytest.mark.parametrize("overrides, words", [
    (("trainer.freeze_modules=backbone_interface.extractor.text_encoder",),
     "needs a frozen VAE (a stored posterior carries no gradient): add backbone_interface.extractor.vae"),
    (("framework.cosmos25.future_loss_type=pixel_l1",),
     "future_loss_type=pixel_l1 compares decoded frames with the video's pixels"),
], ids=["trainable VAE", "pixel loss"])
def test_the_key_is_refused_where_a_stored_posterior_is_wrong(store_cfg, overrides, words):
    with pytest.raises(ConfigError) as raised:
        store_cfg(*overrides)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_augmented_frames_refuse_the_store(store_cfg):
    from DiT4DiT.dataloader.config_checks import check_latent_cache

    cfg = store_cfg("datasets.vla_data.image_augmentation.apply=all")
    with pytest.raises(ConfigError, match="image_augmentation.apply=all augments every dataset's frames"):
        check_latent_cache(cfg.datasets.vla_data)
    dataset = dataset_of(cfg)
    with pytest.raises(DataError, match="whose frames are augmented .* set datasets.vla_data.image_augmentation"
                                        ".apply=none"):
        dataset.use_latents(object())
    droid = store_cfg("datasets.vla_data.data_mix=/nowhere", "datasets.vla_data.data_config=oxe_droid")
    with pytest.raises(ConfigError, match="data config 'oxe_droid' augments its frames"):
        check_latent_cache(droid.datasets.vla_data)
    check_latent_cache(store_cfg("datasets.vla_data.data_config=oxe_droid", "datasets.vla_data.data_mix=/nowhere",
                                 "datasets.vla_data.image_augmentation.apply=none").datasets.vla_data)


@pytest.mark.slow
def test_a_tiny_run_with_the_store_gives_the_losses_of_one_without(tiny_pipeline_dir, tiny_robotwin_root, tmp_path,
                                                                    monkeypatch):
    """The tool fills the store ahead; the run then encodes nothing (a counter on the VAE's encode) and logs the
    losses of the run without the store, within 1e-6."""
    from diffusers import AutoencoderKLWan

    common = [f"--framework.cosmos25.base_model={tiny_pipeline_dir}",
              f"--datasets.vla_data.data_root_dir={tiny_robotwin_root}",
              f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}",
              f"--framework.cosmos25.latent_store_dir={tmp_path / 'latents'}"]
    filled = call_main(latent_store_tool.main, ["--config_yaml", TINY_CONFIG, *common],
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert filled.returncode == 0, filled.stderr[-3000:]
    report = json.loads(filled.stdout)
    assert report["encoded_now"] == report["episodes"] == 9 and report["clips"] > 200

    encodes = []
    original = AutoencoderKLWan.encode
    monkeypatch.setattr(AutoencoderKLWan, "encode", lambda *a, **k: encodes.append(1) or original(*a, **k))
    steps = ("--trainer.max_train_steps=6", "--trainer.logging_frequency=1", "--trainer.eval_interval=3",
             "--trainer.save_interval=6")
    runs = {}
    for store in ("true", "false"):
        encodes.clear()
        result = train_in_process(tiny_pipeline_dir, tiny_robotwin_root, tmp_path / "runs", f"store_{store}", *steps,
                                  *common[3:], f"--framework.cosmos25.latent_cache={store}")
        assert result.returncode == 0, result.stderr[-3000:]
        runs[store] = [[r[k] for k in ("action_loss", "future_video_loss")] for r in metrics(tmp_path / "runs" /
                                                                                                 f"store_{store}")
                       if "total_loss" in r]
        if store == "true":
            assert encodes == [] and "0 encoded now" in result.stderr
    assert len(runs["true"]) == 6
    torch.testing.assert_close(torch.tensor(runs["true"]), torch.tensor(runs["false"]), rtol=0, atol=1e-6)


def test_the_tool_refuses_a_config_the_store_cannot_serve(tmp_path):
    result = call_main(latent_store_tool.main, ["--config_yaml", TINY_CONFIG,
                                                "--framework.cosmos25.future_loss_type=pixel_mse"],
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 2 or result.returncode == 1
    assert "latent_store: " in result.stderr and "pixel_mse compares decoded frames" in result.stderr


def test_the_tool_names_the_unset_base_model_before_indexing_the_data(tmp_path):
    """Without a snapshot folder the tool stops on the key, before it indexes the data (it raised a TypeError
    from Path(None) after the datasets were built)."""
    result = call_main(latent_store_tool.main, ["--config_yaml", TINY_CONFIG, "--framework.cosmos25.base_model=null",
                                                f"--datasets.vla_data.cache_dir={tmp_path / 'cache'}"],
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == ConfigError.exit_code
    assert "latent_store: framework.cosmos25.base_model is not set" in result.stderr
    assert not (tmp_path / "cache").exists()


def test_a_dataset_copy_with_other_video_files_is_a_new_episode(store_cfg, tiny_robotwin_root, tmp_path):
    """The episode's name holds its video files' sizes and mtimes: a re-encoded video is encoded anew."""
    cfg = store_cfg()
    names = {e.name for e in dataset_of(cfg).latent_episodes()}
    copy = tmp_path / "copy"
    shutil.copytree(tiny_robotwin_root, copy)  # copytree keeps mtimes (copy2)
    assert {e.name for e in dataset_of(store_cfg(f"datasets.vla_data.data_root_dir={copy}")).latent_episodes()} == names
    video = next(copy.rglob("*.mp4"))
    video.chmod(0o644)
    video.write_bytes(video.read_bytes() + b"\0")
    changed = {e.name for e in dataset_of(store_cfg(f"datasets.vla_data.data_root_dir={copy}")).latent_episodes()}
    assert len(changed - names) == 1


def test_the_doctor_states_the_stores_size_before_it_is_written(store_cfg, tiny_pipeline_dir):
    """The estimate counts every step of every episode (both splits) and sizes each row as the store writes it:
    within 1% of the files a fill then writes; nothing is written by estimating."""
    from DiT4DiT.config.sections import ConfigSections
    from DiT4DiT.config.typed import section
    from DiT4DiT.doctor.store_estimate import latent_store_estimate

    cfg = store_cfg()
    typed = section(cfg, ConfigSections)
    before = latent_store_estimate(typed.framework.cosmos25, typed.datasets.vla_data, tiny_pipeline_dir, 16, "a3")
    train, held_out = dataset_of(cfg), dataset_of(cfg, "eval")
    episodes = train.latent_episodes() + held_out.latent_episodes()
    assert (before["clips"], before["episodes"], before["stored_bytes"]) == (sum(e.rows for e in episodes),
                                                                              len(episodes), 0)
    store = frozen_model(cfg).prepare_latents([train, held_out])
    written = sum(path.stat().st_size for path in store.folder.iterdir())
    assert before["store_bytes"] == pytest.approx(written, rel=0.01)
    assert 0 < before["build_hours"] and before["clip_tflop"] > 0


def test_the_store_estimate_command_runs_with_only_the_config_and_the_snapshot(tiny_pipeline_dir):
    # The doctor's warning names `python -m DiT4DiT.doctor.store_estimate CONFIG BASE_MODEL`; it raised IndexError
    # (it read the optional PROCESSES and DEVICE before checking they were given).
    from DiT4DiT.doctor import store_estimate

    result = call_main(store_estimate.main, [TINY_CONFIG, str(tiny_pipeline_dir)], dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["embedding_bytes"] > 0
