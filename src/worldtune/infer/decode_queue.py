"""Decoding one video while the next one samples: `worldtune generate`'s `overlap_decode`.

A Cosmos 3 Edge video at 93x480x832 spends about a third of its time in the VAE decoder, whose convolutions leave
parts of the GPU idle that the next video's transformer calls can fill. `DecodeQueue.submit` hands a decode to one
worker thread that runs it on a CUDA stream of its own, after the sampling work it depends on (an event recorded on
the caller's stream); the caller goes on sampling the next video and collects the frames later. The decode uses a
`frames.decode_view` of the VAE, so its feature caches never meet the next video's encode.

Off CUDA (or with overlap off) `submit` decodes at once, in the caller's thread: the same frames, in order.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np
import torch


class DecodeQueue:
    """At most one decode in flight at a time on a side stream (CUDA with `overlap`), else decodes at once."""

    def __init__(self, device: torch.device, overlap: bool) -> None:
        self.device = device
        self.background = overlap and device.type == "cuda"
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="decode") if self.background else None
        self._stream = torch.cuda.Stream(device) if self.background else None

    def submit(self, decode: Callable[[], np.ndarray], tensors: tuple[torch.Tensor, ...] = ()) -> Future:
        """A future of `decode()`'s frames. `tensors` are the inputs the decode reads: they are kept from the
        caching allocator until the side stream is done with them."""
        if not self.background:
            done: Future = Future()
            try:
                done.set_result(decode())
            except BaseException as e:  # noqa: BLE001 -- raised again by result(), as the background path does
                done.set_exception(e)
            return done
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        for t in tensors:
            t.record_stream(self._stream)
        return self._pool.submit(self._run, decode, ready)

    def _run(self, decode: Callable[[], np.ndarray], ready: torch.cuda.Event) -> np.ndarray:
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
            self._stream.wait_event(ready)
            return decode()

    def close(self) -> None:
        """Wait for the decode in flight (if any) and stop the worker."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
