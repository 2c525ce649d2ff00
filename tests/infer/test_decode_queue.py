"""Decoding while the next video samples (infer/decode_queue.py, `generate.overlap_decode`): off CUDA a decode runs
at once and in order; the decoder's view of the VAE keeps caches of its own (the next video's encode resets the
original's) and decodes the same frames as the pipeline's VAE."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from worldtune.infer.decode_queue import DecodeQueue
from worldtune.models.frames import decode_to_frames, decode_view


def test_off_cuda_a_decode_runs_at_once_in_order():
    queue = DecodeQueue(torch.device("cpu"), overlap=True)
    order: list[int] = []
    futures = [queue.submit(lambda i=i: order.append(i) or np.full(2, i)) for i in range(3)]
    assert not queue.background and order == [0, 1, 2] and all(f.done() for f in futures)
    assert [int(f.result()[0]) for f in futures] == [0, 1, 2]
    failed = queue.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result()
    queue.close()


def test_the_decode_view_has_its_own_caches_and_decodes_the_same_frames(tiny_cosmos3_dir, one_thread):
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")
    view = decode_view(pipe.vae)
    assert view.decoder is pipe.vae.decoder  # the same weights
    pipe.vae.clear_cache()
    enc, dec = pipe.vae._enc_feat_map, pipe.vae._feat_map
    view.clear_cache()  # a decode starting in another thread
    assert pipe.vae._enc_feat_map is enc and pipe.vae._feat_map is dec  # the original's caches are untouched
    latents = torch.randn(1, pipe.vae.config.z_dim, 3, 4, 7, generator=torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(decode_to_frames(pipe, latents, view), decode_to_frames(pipe, latents))
