"""Reading and writing the short videos evaluation works on, with PyAV only.

Evaluation reads whole clips (tens to a few hundred frames at most) into memory as one
(T, H, W, 3) uint8 RGB array: every metric needs random access to frames, and a 93-frame
432x768 clip is ~90 MB. A file that cannot be decoded raises `VideoReadError`, which callers
count as a skip instead of crashing a long evaluation.
"""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path

import numpy as np

from worldtune.errors import EvaluationError


class VideoReadError(EvaluationError):
    """A video file is missing, empty or cannot be decoded."""


def read_video(path: str | Path, max_frames: int | None = None) -> tuple[np.ndarray, float]:
    """All frames of a video as (T, H, W, 3) uint8 RGB, and its frame rate (0.0 when unknown).

    Decoding is the data stage's (`worldtune.data.video`); its errors become `VideoReadError`,
    which evaluation counts as a skip.
    """
    from worldtune.data.video import probe, read_frames
    from worldtune.errors import DatasetError

    p = Path(path)
    if not p.is_file():
        raise VideoReadError(f"video {p} does not exist: check the path in generations.jsonl")
    try:
        fps = float(probe(p).fps or 0.0)
        frames = read_frames(p)
    except DatasetError as e:
        raise VideoReadError(f"{e}: re-encode or remove it") from None
    if len(frames) == 0:
        raise VideoReadError(f"video {p} has no frames: re-encode or remove it")
    return (frames[:max_frames] if max_frames is not None else frames), fps


def encode_video(frames: np.ndarray, fps: float, codec: str = "libx264", fmt: str = "mp4",
                 crf: int = 23) -> bytes:
    """Frames (T, H, W, 3) uint8 RGB as an in-memory video file (H.264 mp4 by default).

    Odd sizes are cropped by one pixel: yuv420p needs even width and height.
    """
    import av

    t, h, w = frames.shape[:3]
    h2, w2 = h - h % 2, w - w % 2
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = w2, h2, "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": str(crf), "preset": "veryfast"}
        elif codec == "libvpx-vp9":
            stream.options = {"crf": str(crf + 10), "b": "0", "deadline": "realtime", "cpu-used": "8"}
        for i in range(t):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frames[i, :h2, :w2]), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def write_video(path: str | Path, frames: np.ndarray, fps: float, codec: str = "libx264") -> Path:
    """Write frames to a file; the container follows the suffix (.mp4 or .webm)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fmt = "webm" if p.suffix == ".webm" else "mp4"
    p.write_bytes(encode_video(frames, fps, codec=codec, fmt=fmt))
    return p


def video_codec(path: str | Path) -> str | None:
    """The codec name of the first video stream, or None when the file cannot be opened."""
    import av

    try:
        with av.open(str(path)) as container:
            return container.streams.video[0].codec_context.name
    except Exception:
        return None
