"""model/modules/clip_encoding.py: a clip through the tiny Wan VAE: the frames it encodes, the posterior of the
conditioning frame (equal to that frame encoded alone: the VAE is causal) and the future latent frames."""

from __future__ import annotations

import torch

from DiT4DiT.model.modules.clip_encoding import clip_posterior, encode_clip, encoding_autocast, load_vae, vae_frames


def test_the_vae_sees_the_conditioning_frame_or_the_whole_groups_in_minus_one_to_one():
    video = torch.rand(2, 7, 3, 8, 8)  # (B, T, 3, H, W) in [0, 1]
    alone = vae_frames(video, temporal_factor=4, with_future=True)
    assert alone.shape == (2, 3, 5, 8, 8) and alone.is_contiguous()  # 1 + 4: the sixth and seventh frames unused
    torch.testing.assert_close(alone[:, :, 0], video[:, 0] * 2 - 1)
    assert vae_frames(video, 4, with_future=False).shape == (2, 3, 1, 8, 8)
    assert vae_frames(video[:, :3], 4, with_future=True).shape[2] == 1  # too short for a whole group


def test_the_conditioning_frames_posterior_is_that_frame_encoded_alone(tiny_pipeline_dir, one_torch_thread):
    torch.manual_seed(0)
    vae = load_vae(tiny_pipeline_dir, torch.float32)
    video = torch.rand(1, 5, 3, 32, 32)
    clip = clip_posterior(vae, video, num_frames_out=5, temporal_factor=4, with_future=True)
    alone = encode_clip(vae, vae_frames(video, 4, with_future=False), 1)
    assert clip.mean.shape[2] == 2 and clip.std.shape[2] == 1  # the conditioning frame and one future frame
    torch.testing.assert_close(clip.mean[:, :, :1], alone.mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(clip.std, alone.std, rtol=1e-5, atol=1e-6)


def test_encoding_on_the_cpu_runs_without_autocast_as_a_cpu_step_does():
    for mixed_precision in ("bf16", "no"):
        with encoding_autocast(torch.device("cpu"), mixed_precision):
            assert not torch.is_autocast_enabled("cpu")
