"""dataloader/summary.py: the one start-up line per dataset, on the tiny RoboTwin data through the robotwin data
config."""

from __future__ import annotations

import pytest

from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.dataset import EpisodeSteps, SampleShape
from DiT4DiT.dataloader.image_augmentation import ImageAugmentation
from DiT4DiT.dataloader.index import load_index
from DiT4DiT.dataloader.reader import DatasetLayout
from DiT4DiT.dataloader.summary import augmentation_words, dataset_line


@pytest.fixture(scope="module")
def steps(tiny_robotwin_root):
    return EpisodeSteps(DatasetLayout(tiny_robotwin_root / "adjust_bottle"), DATA_CONFIGS["robotwin"],
                        SampleShape(video_offsets=(0,), action_horizon=8, image_size=32, max_state_dim=14,
                                    max_action_dim=14))


def test_the_line_names_the_version_episodes_cameras_and_choices(steps, tmp_path):
    index = load_index(steps.layout, ["observation.state", "action"], "task_index", tmp_path)
    line = dataset_line(steps, index, holdout=1, views="side_by_side", modality="meta/modality.json",
                        statistics="computed")
    assert line.startswith(f"dataset {steps.layout.root}: LeRobot v2.1, 3 episodes (1 held out for the eval action "
                           "MSE: datasets.vla_data.holdout_episodes=1")
    assert (f"{index.num_transitions} frames, data config robotwin, cameras cam_high 48x64 video, cam_left_wrist "
            "48x64 video, cam_right_wrist 48x64 video combined side_by_side, no image augmentation, modality "
            f"meta/modality.json, statistics computed over {index.num_transitions} rows") in line
    assert "none held out: every episode trains" in dataset_line(steps, index, holdout=0, views="as_frames",
                                                                 modality="derived", statistics="computed")


def test_augmentation_is_described_with_its_settings():
    words = augmentation_words(ImageAugmentation(crop_scale=0.9, brightness=0.2, contrast=0.3, saturation=0.4, hue=0.05))
    assert words.startswith("image augmentation crop 0.9 (random in training, centred at evaluation)")
    assert "brightness 0.2 contrast 0.3 saturation 0.4 hue 0.05 (training only)" in words
