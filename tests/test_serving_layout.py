"""Serving and evaluation in the run's camera layout (datasets.vla_data.views): side_by_side runs (the golden tiny
RoboTwin run) and as_frames runs (a tiny run of ours on two non-wrist cameras, and an original-style run folder
that records no layout) get, from a request's camera views, exactly the frames training fed the model."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from DiT4DiT.config.schema import ConfigError, load_config
from DiT4DiT.config.sections import DatasetsVlaDataSection
from DiT4DiT.config.typed import section
from DiT4DiT.dataloader.dataset import combine_views
from DiT4DiT.evaluation.observations import camera_fields
from DiT4DiT.evaluation.open_loop import evaluate_episode
from DiT4DiT.model.framework.base_framework import baseframework
from DiT4DiT.serving.client import PolicyClient, ServerError
from DiT4DiT.serving.layout import run_layout
from DiT4DiT.serving.policy import Policy, RequestError
from DiT4DiT.serving.server import running_server
from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.fixtures_data import dataset_of
from helpers.training_runs import train_in_process

SIZE = 32  # the tiny config's image_size
FRAMES = 5  # frames per camera in the tiny config (9 delta indices, every 2nd)
STEPS = 2


@pytest.fixture(scope="module")
def franka_dataset(tmp_path_factory) -> Path:
    """demo_sim_franka_delta_joints data: two non-wrist cameras (base_view, ego_view), 48x64 videos."""
    return generate_lerobot("demo_sim_franka_delta_joints", tmp_path_factory.mktemp("franka") / "sim_pick_place")


@pytest.fixture(scope="module")
def frames_run(tiny_pipeline_dir, franka_dataset, tmp_path_factory) -> Path:
    """A tiny run of ours on the franka data with datasets.vla_data.views=auto: training resolves as_frames."""
    root = tmp_path_factory.mktemp("frames_runs")
    result = train_in_process(tiny_pipeline_dir, franka_dataset.parent, root, "frames",
                              f"--datasets.vla_data.data_mix={franka_dataset}",
                              "--datasets.vla_data.data_config=demo_sim_franka_delta_joints",
                              f"--trainer.max_train_steps={STEPS}", f"--trainer.save_interval={STEPS}",
                              f"--trainer.eval_interval={STEPS}", "--trainer.num_warmup_steps=1")
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "frames"


def _ckpt(run: Path) -> Path:
    return run / "checkpoints" / f"steps_{STEPS}_pytorch_model.pt"


@pytest.fixture(scope="module")
def original_frames_run(frames_run, franka_dataset, tmp_path_factory) -> Path:
    """frames_run as the original writes it: the named mixture demo_sim_pick_place, no views key in config.yaml or
    in dataset_statistics.json, and every weight in the checkpoint."""
    run = tmp_path_factory.mktemp("original_runs") / "frames"
    (run / "checkpoints").mkdir(parents=True)
    config = OmegaConf.load(frames_run / "config.yaml")
    del config.datasets.vla_data["views"]
    config.datasets.vla_data.data_mix = "demo_sim_pick_place"
    config.datasets.vla_data.data_root_dir = str(franka_dataset.parent)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(config))
    statistics = json.loads((frames_run / "dataset_statistics.json").read_text())
    for entry in statistics.values():
        del entry["views"]
    (run / "dataset_statistics.json").write_text(json.dumps(statistics))
    torch.save(baseframework.from_pretrained(_ckpt(frames_run)).state_dict(), _ckpt(run))
    return run


def _policy(run: Path) -> Policy:
    return Policy.load(_ckpt(run), torch.device("cpu"), max_batch=4)


@pytest.fixture(scope="module")
def frames_policy(frames_run, one_thread) -> Policy:
    return _policy(frames_run)


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _training_sample(run: Path, index: int = 3):
    """(the dataset's sample `index` as training builds it, the raw step it was made from), from the run's config."""
    dataset = dataset_of(load_config(run / "config.yaml"))
    position, step = dataset.choose(index)
    return dataset[index], dataset.parts[position].read(step, dataset.frame_decoder)


class ExtractorInputs:
    """The frames the Cosmos feature extractor receives (conditioning frame, future frames), call by call: it takes
    the (B, T, 3, H, W) clip, frame 0 conditioning."""

    def __init__(self, model):
        self.calls = []
        self.handle = model.backbone_interface.extractor.register_forward_pre_hook(
            lambda module, args: self.calls.append((args[1][:, 0].clone(), args[1][:, 1:].clone())))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _served_and_trained(policy: Policy, run: Path):
    """Extractor inputs for one sample, (served from its raw camera views, trained on its training sample)."""
    sample, raw = _training_sample(run)
    request = {"examples": [{"views": [view[0] for view in raw.views], "lang": raw.lang, "state": sample["state"]}]}
    with ExtractorInputs(policy.model) as inputs, torch.no_grad():
        policy.infer(policy.check(request))
        policy.model.forward([sample])
    (served, _), (trained, future) = inputs.calls
    return sample, served, trained, future


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["side_by_side", "as_frames"])
def test_the_served_frame_is_the_frame_training_fed_the_model(layout, tiny_run, tiny_policy, frames_run,
                                                              frames_policy):
    run, policy = (tiny_run, tiny_policy) if layout == "side_by_side" else (frames_run, frames_policy)
    assert policy.shape.views == layout
    sample, served, trained, future = _served_and_trained(policy, run)
    cameras = 3 if layout == "side_by_side" else 2  # RoboTwin's three side by side; franka's two as frames
    if layout == "side_by_side":
        assert trained.shape[-2:] == (SIZE, SIZE * cameras) and future.shape[1] == FRAMES - 1
    else:
        assert trained.shape[-2:] == (SIZE, SIZE) and future.shape[1] == cameras * FRAMES - 1
    torch.testing.assert_close(served, trained, rtol=0, atol=0)
    torch.testing.assert_close(served[0], sample["image"][0], rtol=0, atol=0)


def _direct_actions(model, frames: list, lang: str, state) -> np.ndarray:
    torch.manual_seed(7)
    return model.predict_action([{"image": frames, "lang": lang, "state": state}])["normalized_actions"]


def _served_actions(policy: Policy, example: dict) -> np.ndarray:
    torch.manual_seed(7)
    return policy.infer(policy.check({"examples": [example]}))["normalized_actions"]


@pytest.mark.slow
def test_as_frames_run_folders_ours_and_the_originals_serve_the_models_actions(frames_run, original_frames_run,
                                                                               frames_policy, caplog):
    sample, raw = _training_sample(frames_run)
    views = [view[0] for view in raw.views]
    direct = _direct_actions(frames_policy.model, sample["image"], raw.lang, sample["state"])
    ours = _served_actions(frames_policy, {"views": views, "lang": raw.lang, "state": sample["state"]})
    with caplog.at_level(logging.INFO, logger="DiT4DiT.serving.policy"):
        original = _policy(original_frames_run)
    assert "camera layout as_frames (implied by data config demo_sim_franka_delta_joints" in caplog.text
    assert original.shape.views == "as_frames" and original.metadata()["views"] == "as_frames"
    theirs = _served_actions(original, {"views": views, "lang": raw.lang, "state": sample["state"]})
    np.testing.assert_allclose(ours, direct, rtol=0, atol=1e-6)
    np.testing.assert_allclose(theirs, direct, rtol=0, atol=1e-6)
    # The original's frame-list form, camera 1's frame first, serves the same.
    frames = [np.ascontiguousarray((frame.permute(1, 2, 0) * 255).round().byte().numpy())
              for frame in combine_views([v[None] for v in views], SIZE, "as_frames")]
    listed = _served_actions(original, {"image": frames, "lang": raw.lang, "state": sample["state"]})
    np.testing.assert_allclose(listed, direct, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_the_metadata_names_the_layout_and_one_client_helper_serves_both(tiny_policy, frames_policy):
    rng = np.random.default_rng(0)
    state = rng.uniform(-1, 1, (1, 14)).astype(np.float32)
    for policy, cameras, field in ((tiny_policy, 3, "image"), (frames_policy, 2, "views")):
        with running_server(policy) as server, PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
            assert client.metadata["views"] == policy.shape.views
            views = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(cameras)]
            fields = camera_fields(views, client.metadata)
            assert list(fields) == [field]
            torch.manual_seed(3)
            served = client.infer([{**fields, "lang": "pick the cube", "state": state}])["normalized_actions"]
        # What the helper sent, as frames of the run's layout, given to the model directly.
        resized = fields["views"] if field == "views" else fields["image"]
        torch.manual_seed(3)
        direct = policy.model.predict_action([{"image": [np.array(r) for r in resized[:1]], "lang": "pick the cube", "state": state}])
        np.testing.assert_allclose(served, direct["normalized_actions"], rtol=0, atol=1e-6)
    assert camera_fields(views, {"image_size": SIZE})["image"][0].shape == (SIZE, 2 * SIZE, 3)  # the original's server


@pytest.mark.slow
def test_a_request_in_the_other_layout_is_refused_with_the_runs_shape(frames_policy, tiny_policy):
    wide = {"image": [np.zeros((SIZE, 2 * SIZE, 3), np.uint8)], "lang": "pick"}
    with pytest.raises(RequestError, match=r"image\[0\] has shape \(32, 64, 3\); this run combines cameras as_frames, "
                                           r"so a frame is \(32, 32, 3\), one camera .*'views'"):
        frames_policy.check({"examples": [wide]})
    with running_server(frames_policy) as server, PolicyClient("127.0.0.1", server.port, wait_s=10) as client:
        with pytest.raises(ServerError, match=r"this run combines cameras as_frames"):
            client.infer([wide])
        assert client.infer([{"views": [np.zeros((40, 40, 3), np.uint8)] * 2, "lang": "pick"}])["actions"].shape[0] == 1
    cases = {
        "float views": ({"views": [np.zeros((SIZE, SIZE, 3), np.float32)], "lang": "go"}, r"views\[0\] is a float32"),
        "four views": ({"views": [np.zeros((SIZE, SIZE, 3), np.uint8)] * 4, "lang": "go"}, "1 to 3 cameras"),
        "huge view": ({"views": [np.zeros((2000, 2000, 3), np.uint8)], "lang": "go"}, "at most 20480 pixels"),
        "both forms": ({"views": [np.zeros((SIZE, SIZE, 3), np.uint8)], "image": [np.zeros((SIZE, 96, 3), np.uint8)],
                        "lang": "go"}, "has both 'image' and 'views'"),
    }
    for name, (example, message) in cases.items():
        with pytest.raises(RequestError, match=message):
            tiny_policy.check({"examples": [example]})
    mixed = [{"views": [np.zeros((SIZE, SIZE, 3), np.uint8)], "lang": "go"},
             {"image": [np.zeros((SIZE, SIZE, 3), np.uint8)], "lang": "go"}]
    with pytest.raises(RequestError, match="some examples carry 'views' and some 'image'"):
        tiny_policy.check({"examples": mixed})


@pytest.mark.slow
def test_open_loop_evaluation_feeds_the_runs_layout(frames_run, frames_policy):
    dataset = dataset_of(load_config(frames_run / "config.yaml"), split="eval")
    part = dataset.parts[0]
    with ExtractorInputs(frames_policy.model) as inputs:
        evaluate_episode(frames_policy, part, dataset.frame_decoder, 0)
    first = combine_views(part.read(0, dataset.frame_decoder).views, SIZE, "as_frames")[0]  # the episode's step 0
    served = inputs.calls[0][0]
    assert served.shape[-2:] == (SIZE, SIZE)
    torch.testing.assert_close(served[0], first, rtol=0, atol=0)


def _config(views="auto", data_mix="demo_sim_pick_place", data_config="auto") -> DatasetsVlaDataSection:
    data = section(load_config(None).datasets.vla_data, DatasetsVlaDataSection)
    return replace(data, views=views, data_mix=data_mix, data_config=data_config, data_root_dir=None)


def test_the_layout_comes_from_the_config_key_then_the_statistics_then_the_data_configs(tmp_path):
    assert run_layout(_config("side_by_side"), {"views": "as_frames"}).views == "side_by_side"
    assert run_layout(_config(), {"views": "side_by_side"}).views == "side_by_side"
    implied = run_layout(_config(), {})
    assert implied.views == "as_frames" and "demo_sim_franka_delta_joints" in implied.source
    assert run_layout(_config(data_mix="libero_all"), {}).views == "side_by_side"
    # A path mixture that is not on this machine: only our runs from before the key have no record, all side by side.
    gone = run_layout(_config(data_mix=str(tmp_path / "gone"), data_config="robotwin"), {})
    assert gone.views == "side_by_side" and "cannot be read here" in gone.source
    with pytest.raises(ConfigError, match="views='sideways' is not a camera layout"):
        run_layout(_config(), {"views": "sideways"})
