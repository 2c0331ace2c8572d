"""The original's image augmentation: oxe_droid's parameters, its order and semantics (checked against torchvision's
transform classes, the original's backend), drawn per sample from the data seed, and left out at evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as T

from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.dataset import combine_views
from DiT4DiT.dataloader.image_augmentation import JITTERS, OXE_DROID, Draw, ImageAugmentation, augment_views, draw
from helpers.fixtures_data import dataset_of


def test_each_data_config_augments_as_the_originals_does():
    """The original's OxeDroidDataConfig: VideoCrop(scale=0.95), VideoResize(224), VideoColorJitter(brightness=0.3,
    contrast=0.4, saturation=0.5, hue=0.08); every other data config applies no video transform."""
    assert DATA_CONFIGS["oxe_droid"].augmentation == ImageAugmentation(
        crop_scale=0.95, brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08)
    assert [name for name, config in DATA_CONFIGS.items() if config.augmentation is not None] == ["oxe_droid"]


def camera_frames(seed: int, cameras: int = 2, frames: int = 3, height: int = 60, width: int = 80) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (frames, height, width, 3), dtype=np.uint8) for _ in range(cameras)]


def with_torchvision(views: list[np.ndarray], crop: T.Transform, jitter: T.Transform | None, size: int):
    """The original's pipeline on the views stacked as one (V*T, 3, H, W) batch: VideoToTensor, its crop,
    Resize(size, size) (antialiased), ColorJitter, VideoToNumpy; with the parameters the classes draw."""
    x = torch.cat([torch.from_numpy(v).permute(0, 3, 1, 2).float() / 255.0 for v in views])
    crop_params = crop.make_params([x])
    x = T.Resize((size, size), interpolation=T.InterpolationMode.BILINEAR)(crop.transform(x, crop_params))
    jitter_params = None
    if jitter is not None:
        jitter_params = jitter.make_params([x])
        x = jitter.transform(x, jitter_params)
    out = (x.permute(0, 2, 3, 1) * 255).to(torch.uint8).numpy()
    return np.split(out, len(views)), crop_params, jitter_params


def test_a_training_draw_is_the_originals_crop_resize_and_jitter_in_its_order():
    """torchvision draws the crop and the jitter (its RandomCrop and ColorJitter, as the original runs them); the same
    draw through augment_views gives the same uint8 frames, for every camera and frame."""
    views = camera_frames(0)
    torch.manual_seed(3)
    crop_h, crop_w = int(60 * OXE_DROID.crop_scale), int(80 * OXE_DROID.crop_scale)
    expected, crop, jitter = with_torchvision(
        views, T.RandomCrop((crop_h, crop_w)),
        T.ColorJitter(brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08), 32)
    factors = (jitter["brightness_factor"], jitter["contrast_factor"], jitter["saturation_factor"], jitter["hue_factor"])
    same = Draw(top=(crop["top"] + 0.5) / (60 - crop_h + 1), left=(crop["left"] + 0.5) / (80 - crop_w + 1),
                order=tuple(int(i) for i in jitter["fn_idx"]), factors=factors)
    ours = augment_views(views, OXE_DROID, 32, same)
    assert all(np.array_equal(a, b) for a, b in zip(ours, expected))
    # The order matters: the same factors in another order give other frames.
    reordered = Draw(same.top, same.left, tuple(reversed(same.order)), same.factors)
    assert not all(np.array_equal(a, b) for a, b in zip(augment_views(views, OXE_DROID, 32, reordered), expected))


def test_evaluation_is_the_centre_crop_and_resize_without_jitter():
    views = camera_frames(1)
    expected, _, _ = with_torchvision(views, T.CenterCrop((int(60 * 0.95), int(80 * 0.95))), None, 32)
    assert all(np.array_equal(a, b) for a, b in zip(augment_views(views, OXE_DROID, 32, None), expected))


def test_draws_cover_the_originals_ranges():
    rng = np.random.default_rng(0)
    draws = [draw(OXE_DROID, rng) for _ in range(2000)]
    factors = np.array([d.factors for d in draws])
    bounds = {"brightness": (0.7, 1.3), "contrast": (0.6, 1.4), "saturation": (0.5, 1.5), "hue": (-0.08, 0.08)}
    for index, name in enumerate(JITTERS):
        low, high = bounds[name]
        assert low <= factors[:, index].min() < low + 0.01 and high - 0.01 < factors[:, index].max() <= high
    assert len({d.order for d in draws}) == 24  # every order of the four
    tops = np.array([d.top for d in draws])
    assert 0 <= tops.min() < 0.01 and 0.99 < tops.max() < 1


def test_samples_draw_from_the_data_seed(data_cfg, tiny_robotwin_root):
    """apply=all augments the tiny RoboTwin set: a sample is the same whenever (seed, epoch, index) is (so a resumed
    run reads what an uninterrupted one does), differs in another epoch, and the held-out split is not jittered."""
    cfg = data_cfg(tiny_robotwin_root, "robotwin", "datasets.vla_data.image_augmentation.apply=all",
                   "datasets.vla_data.image_size=32")
    train, again = dataset_of(cfg), dataset_of(cfg)
    plain = dataset_of(data_cfg(tiny_robotwin_root, "robotwin", "datasets.vla_data.image_size=32"))
    first = torch.stack(train[7]["image"])
    assert torch.equal(first, torch.stack(again[7]["image"]))
    assert not torch.equal(first, torch.stack(plain[7]["image"]))
    again.set_epoch(1)
    assert again.choose(7) != train.choose(7) or not torch.equal(first, torch.stack(again[7]["image"]))
    held_out = dataset_of(cfg, "eval")
    frames = torch.stack(held_out[0]["image"])
    assert torch.equal(frames, torch.stack(dataset_of(cfg, "eval")[0]["image"]))
    position, step = held_out.choose(0)
    centred = augment_views(held_out.parts[position].read(step, held_out.frame_decoder).views,
                            ImageAugmentation(0.95, 0, 0, 0, 0), 32, None)
    assert torch.equal(frames, torch.stack(combine_views(centred, 32, held_out.views)))


@pytest.mark.parametrize("apply, expected", [("data_config", None), ("none", None),
                                             ("all", ImageAugmentation(0.9, 0.1, 0.2, 0.3, 0.04))])
def test_the_section_chooses_whose_frames_are_augmented(apply, expected, data_cfg, tiny_robotwin_root):
    cfg = data_cfg(tiny_robotwin_root, "robotwin", f"datasets.vla_data.image_augmentation.apply={apply}",
                   "datasets.vla_data.image_augmentation.crop_scale=0.9",
                   "datasets.vla_data.image_augmentation.brightness=0.1",
                   "datasets.vla_data.image_augmentation.contrast=0.2",
                   "datasets.vla_data.image_augmentation.saturation=0.3",
                   "datasets.vla_data.image_augmentation.hue=0.04")
    assert set(dataset_of(cfg).augmentations) == {expected}
