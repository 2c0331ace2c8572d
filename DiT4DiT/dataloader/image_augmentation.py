"""The original's image augmentation (its VideoCrop, VideoResize and VideoColorJitter), drawn per sample from the
data seed.

As the original applies them (its oxe_droid data config, torchvision backend): all cameras' frames of a sample take
one draw (one crop position, one set of jitter factors applied in one random order), in the order crop (a share
`crop_scale` of each side) -> resize to image_size (bilinear, antialiased) -> colour jitter (brightness, contrast,
saturation factors drawn from [1 - x, 1 + x], hue from [-x, x]); then the frames become uint8 by truncation (its
VideoToNumpy) and are combined as any sample's. In training the crop is random and the colours jitter; at evaluation
(the held-out split) the crop is centred and the colours are left alone. The draw comes from a generator seeded by
the sample's (seed, epoch, index), so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from DiT4DiT.config.sections import DatasetsVlaDataImageAugmentationSection

JITTERS = ("brightness", "contrast", "saturation", "hue")


@dataclass(frozen=True)
class ImageAugmentation:
    crop_scale: float  # each side of the crop, as a share of the camera's
    brightness: float  # factor drawn from [max(0, 1 - x), 1 + x]
    contrast: float
    saturation: float
    hue: float  # shift drawn from [-x, x] (of a full turn)


# The original's OxeDroidDataConfig.transform(): VideoCrop(scale=0.95), VideoResize(224, 224, "linear"),
# VideoColorJitter(brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08).
OXE_DROID = ImageAugmentation(crop_scale=0.95, brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08)


@dataclass(frozen=True)
class Draw:
    """One sample's draw: where its crop lies and how its colours jitter."""

    top: float  # the crop's offset, as a share of the room the crop leaves, in [0, 1)
    left: float
    order: tuple[int, ...]  # indices into JITTERS, in the order they apply
    factors: tuple[float, ...]  # per JITTERS entry: brightness, contrast, saturation factors, hue shift


def draw(augmentation: ImageAugmentation, rng: np.random.Generator) -> Draw:
    """A training draw, from the sample's own generator."""
    top, left = rng.random(2)
    order = tuple(int(i) for i in rng.permutation(len(JITTERS)))
    factors = []
    for name in JITTERS:
        x = getattr(augmentation, name)
        low, high = (-x, x) if name == "hue" else (max(0.0, 1.0 - x), 1.0 + x)
        factors.append(float(rng.uniform(low, high)))
    return Draw(float(top), float(left), order, tuple(factors))


def _crop_box(height: int, width: int, scale: float, chosen: Draw | None) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width): int(side x scale), at the drawn place, or centred (torchvision's
    rounding) without a draw."""
    crop_h, crop_w = int(height * scale), int(width * scale)
    if chosen is None:
        return int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0)), crop_h, crop_w
    return (min(int(chosen.top * (height - crop_h + 1)), height - crop_h),
            min(int(chosen.left * (width - crop_w + 1)), width - crop_w), crop_h, crop_w)


def augment_views(views: list[np.ndarray], augmentation: ImageAugmentation, size: int,
                  chosen: Draw | None) -> list[np.ndarray]:
    """Each camera's (T, H, W, 3) uint8 frames cropped, resized to size x size and (with a training draw `chosen`)
    colour-jittered, as (T, size, size, 3) uint8; `chosen` None is the evaluation transform (centre crop, resize)."""
    import torch  # here: the data configs import this module, and the torch-free doctor reads them
    import torchvision.transforms.v2.functional as TF

    jitters = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
    out = []
    for pixels in views:
        x = torch.from_numpy(np.ascontiguousarray(pixels)).permute(0, 3, 1, 2).float().div_(255.0)
        top, left, crop_h, crop_w = _crop_box(x.shape[-2], x.shape[-1], augmentation.crop_scale, chosen)
        x = TF.resize(TF.crop(x, top, left, crop_h, crop_w), [size, size], antialias=True)
        if chosen is not None:
            for index in chosen.order:
                x = jitters[index](x, chosen.factors[index])
        out.append((x * 255.0).to(torch.uint8).permute(0, 2, 3, 1).numpy())
    return out


def augmentation_of(own: ImageAugmentation | None,
                    section: DatasetsVlaDataImageAugmentationSection) -> ImageAugmentation | None:
    """The augmentation a dataset's frames get, as `section` (datasets.vla_data.image_augmentation) says: its data
    config's `own` (apply=data_config), the section's values (apply=all) or none (apply=none)."""
    if section.apply == "none":
        return None
    if section.apply == "all":
        return ImageAugmentation(section.crop_scale, section.brightness, section.contrast, section.saturation,
                                 section.hue)
    return own
