"""DiT4DiT/dataloader/episode_clips.py on its own: an episode's clips, from one decode per camera, are the clips its
samples hold (real tiny datasets: mp4 cameras and PNG image cells), in both camera layouts, and a video that went
missing after the dataset was read is named. (tests/test_latent_store.py checks the store that encodes them.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from DiT4DiT.dataloader.dataset import combine_views
from DiT4DiT.dataloader.episode_clips import EpisodeClips
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.tools.tiny_dataset import generate_lerobot
from helpers.fixtures_data import dataset_of

# Offsets up to 9 rows ahead: the last steps of an episode repeat its last frame, as a sample's do.
SAMPLE = ("datasets.vla_data.image_size=32", "datasets.vla_data.video_delta_indices=[0,3,6,9]",
          "datasets.vla_data.action_video_freq_ratio=1", "datasets.vla_data.holdout_episodes=0",
          "datasets.vla_data.image_augmentation.apply=none")  # as the latent store needs


@pytest.fixture
def tiny_task(tiny_robotwin_root, data_cfg):
    """tiny_task(views) -> the tiny RoboTwin task 1 (3 episodes, 3 mp4 cameras) as the trainer builds it."""
    return lambda views="side_by_side": dataset_of(data_cfg(tiny_robotwin_root, "robotwin_task1", *SAMPLE,
                                                            f"datasets.vla_data.views={views}"))


class CountedDecoder:
    """The dataset's own decoder, with its calls recorded: (episode, number of timestamps) each."""

    def __init__(self, decode):
        self.decode, self.calls = decode, []

    def __call__(self, path, timestamps, *, fps, episode):
        self.calls.append((episode, len(timestamps)))
        return self.decode(path, timestamps, fps=fps, episode=episode)


def sample_clip(part, step: int, decode, views: str) -> torch.Tensor:
    """The clip a sample of `step` holds, decoded on its own as __getitem__ decodes it."""
    return torch.stack(combine_views(part.read(step, decode).views, part.shape.image_size, views))


def first_and_last_steps(part, episode: int) -> list[tuple[int, int]]:
    """(step, row) of the episode's first and last row."""
    position = int(np.searchsorted(part.episodes, episode))
    start = int(part.ends[position - 1]) if position else 0
    return [(start, 0), (int(part.ends[position]) - 1, part.episode_length(episode) - 1)]


@pytest.mark.parametrize("views", ["side_by_side", "as_frames"])
def test_each_steps_clip_is_the_clip_its_sample_holds(tiny_task, views):
    dataset = tiny_task(views)
    episodes = dataset.latent_episodes()
    assert [(e.steps, e.episode) for e in episodes] == [(dataset.parts[0], int(e)) for e in dataset.parts[0].episodes]
    assert len(episodes) == 3
    clips = {(id(e.steps), e.episode): list(e.clips()) for e in episodes}
    for e in episodes:
        ours = clips[(id(e.steps), e.episode)]
        assert len(ours) == e.rows
        for step, row in first_and_last_steps(e.steps, e.episode):
            assert torch.equal(ours[row], sample_clip(e.steps, step, dataset.frame_decoder, views))
    for index in range(0, len(dataset), 11):  # samples as the trainer draws them
        position, step = dataset.choose(index)
        part = dataset.parts[position]
        episode, row = part.locate(step)
        assert torch.equal(clips[(id(part), episode)][row], torch.stack(dataset[index]["image"]))


@pytest.mark.parametrize("views, shape", [("side_by_side", (4, 3, 32, 96)), ("as_frames", (12, 3, 32, 32))])
def test_a_clip_is_the_offsets_frames_of_every_camera_in_zero_to_one(tiny_task, views, shape):
    episode = tiny_task(views).latent_episodes()[0]
    first = next(episode.clips())
    assert tuple(first.shape) == shape and first.dtype == torch.float32
    assert 0.0 <= float(first.min()) and float(first.max()) <= 1.0 and float(first.std()) > 0.0


def test_the_last_steps_repeat_the_episodes_last_frame(tiny_task):
    episode = tiny_task().latent_episodes()[0]
    last = list(episode.clips())[-1]
    assert all(torch.equal(last[0], frame) for frame in last[1:])  # offsets 3, 6, 9 lie past the end
    assert not torch.equal(list(episode.clips())[0][0], last[0])


def test_each_camera_is_decoded_once_for_the_whole_episode(tiny_task):
    dataset = tiny_task()
    part = dataset.parts[0]
    counted = CountedDecoder(dataset.frame_decoder)
    episode = EpisodeClips(part, int(part.episodes[1]), counted, dataset.views)
    assert sum(1 for _ in episode.clips()) == episode.rows
    assert counted.calls == [(episode.episode, episode.rows)] * len(part.video_keys) and len(part.video_keys) == 3


def test_the_clips_are_drawn_lazily(tiny_task):
    dataset = tiny_task()
    counted = CountedDecoder(dataset.frame_decoder)
    clips = EpisodeClips(dataset.parts[0], 0, counted, dataset.views).clips()
    assert counted.calls == []  # nothing decoded until the first clip is asked for
    next(clips)
    assert len(counted.calls) == 3


def test_an_episode_is_named_by_its_dataset_rows_cameras_and_files(tiny_task):
    dataset = tiny_task()
    part = dataset.parts[0]
    episode = EpisodeClips(part, 2, dataset.frame_decoder, "side_by_side")
    named = json.loads(episode.name)
    assert named["episode"] == 2 and named["rows"] == episode.rows == part.episode_length(2)
    assert named["dataset"] == part.layout.name and named["cameras"] == part.camera_keys
    assert [f[0] for f in named["files"]] == sorted(str(part.layout.video_path(2, k).relative_to(part.layout.root))
                                                   for k in part.video_keys)
    assert episode.name != EpisodeClips(part, 1, episode.decode, "side_by_side").name
    assert episode.describe() == f"{part.layout.root} episode 2"


def test_cameras_stored_as_image_cells_give_the_same_clips_without_a_video_decode(tmp_path, data_cfg):
    folder = generate_lerobot("robotwin", tmp_path / "cells", images=True, episodes=2, frames=(12, 14), height=24,
                              width=32)
    dataset = dataset_of(data_cfg("null", str(folder), "datasets.vla_data.data_config=robotwin", *SAMPLE))
    part = dataset.parts[0]
    counted = CountedDecoder(dataset.frame_decoder)
    for number in part.episodes:
        episode = EpisodeClips(part, int(number), counted, dataset.views)
        clips = list(episode.clips())
        for step, row in first_and_last_steps(part, episode.episode):
            assert torch.equal(clips[row], sample_clip(part, step, counted, dataset.views))
    assert counted.calls == [] and part.image_keys == part.camera_keys


def test_a_video_gone_since_the_dataset_was_read_is_named(writable_task, data_cfg):
    dataset = dataset_of(data_cfg(writable_task.parent, "robotwin_task1", *SAMPLE))
    episode = dataset.latent_episodes()[1]
    video = episode.steps.layout.video_path(episode.episode, episode.steps.video_keys[0])
    video.unlink()
    with pytest.raises(DataError) as raised:
        next(episode.clips())
    assert str(raised.value) == (f"{video}: video of episode {episode.episode} is missing; restore it (info.json "
                                 "video_path names it)")
    with pytest.raises(DataError) as raised:  # the store asks for the name first; it was a FileNotFoundError
        episode.name
    assert str(raised.value) == (f"{video}: file of episode {episode.episode} is missing; restore it (the dataset held "
                                 "it when it was read)")

