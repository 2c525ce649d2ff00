"""Thin PyAV helpers: probe a video, read chosen frames, write a video atomically.

Why our own helpers: every stage reads frames by index (training clips, first frames for
generation, evaluation) and LeRobot v3 stores many episodes in one mp4, so reading must work on a
time span [start_time, end_time) of a file. Writing is atomic (temp file in the same folder,
fsync, `os.replace`) so that a killed or out-of-disk run never leaves a half-written mp4 under its
final name; resumable stages rely on "the file exists" meaning "the file is complete".

Frames are numpy arrays `[T, H, W, 3]` of uint8 RGB, except where a stage asks for yuv420p
("I420"): `[T, H*3/2, W]` uint8, the Y plane's H rows followed by the U and V planes (H/2 x W/2
each) packed row after row — the layout PyAV's `to_ndarray`/`from_ndarray` use. `prepare` works
in I420 so that a clip goes from the source's decoder to the encoder without two colour
conversions (`i420_planes` gives the three planes as views).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Sequence

import av
import numpy as np

from worldtune.atomic import atomic_write_bytes, output_error, temp_path
from worldtune.errors import ConfigError, DatasetError, DiskFullError

__all__ = ["VideoInfo", "VideoWriter", "probe", "read_frames", "write_video", "i420_frame", "i420_planes", "rgb_to_i420",
           "atomic_write_bytes", "DiskFullError"]


@dataclass(frozen=True)
class VideoInfo:
    """What the container header says about the first video stream."""

    path: str
    fps: float
    num_frames: int  # from the header, or duration * fps when the header has no count
    height: int
    width: int
    codec: str
    duration: float  # seconds


def _open(path: str | Path) -> av.container.InputContainer:
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"video {p} does not exist")
    try:
        return av.open(str(p), mode="r")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise DatasetError(f"video {p} cannot be opened ({_short(e)}): the file is corrupt or not a video") from None


def _short(e: BaseException) -> str:
    return str(e).splitlines()[0][:160] if str(e) else type(e).__name__


def probe(path: str | Path) -> VideoInfo:
    """fps, frame count, size and codec from the header alone (no decoding: cheap)."""
    with _open(path) as c:
        if not c.streams.video:
            raise DatasetError(f"video {path} has no video stream")
        s = c.streams.video[0]
        fps = float(s.average_rate or s.guessed_rate or s.base_rate or 0)
        if s.duration is not None and s.time_base is not None:
            duration = float(s.duration * s.time_base)
        elif c.duration is not None:
            duration = c.duration / av.time_base
        else:
            duration = 0.0
        n = int(s.frames or 0)
        if n <= 0 and fps > 0:
            n = int(round(duration * fps))
        return VideoInfo(str(path), fps, n, int(s.codec_context.height), int(s.codec_context.width),
                         s.codec_context.name, duration)


def i420_planes(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views (Y [..., H, W], U and V [..., H/2, W/2]) into I420 frames `[..., H*3/2, W]` (writable if they are).

    The planes are cut from each frame's bytes, not its rows: when H/2 is odd (a 90-row frame has
    45 chroma rows) U and V start in the middle of a packed row. That needs each frame's rows to
    follow one another in memory; frames whose rows do not are copied and the planes are read-only,
    so a write meant for the caller's array fails instead of being lost.
    """
    h3, w = frames.shape[-2:]
    if h3 % 3 or w % 2:
        raise ValueError(f"a {h3}x{w} array is not an I420 frame [H*3/2, W] of even H and W")
    h, lead = h3 * 2 // 3, frames.shape[:-2]
    if frames.strides[-2] != w * frames.strides[-1]:
        frames = np.ascontiguousarray(frames)
        frames.flags.writeable = False
    flat = frames.reshape(*lead, h3 * w)  # a view: rows are contiguous
    luma, chroma = h * w, h * w // 4
    y = flat[..., :luma].reshape(*lead, h, w)
    u = flat[..., luma:luma + chroma].reshape(*lead, h // 2, w // 2)
    v = flat[..., luma + chroma:].reshape(*lead, h // 2, w // 2)
    return y, u, v


# Decoded frames whose Y'CbCr values mean what an untagged yuv420p file means to a reader (BT.601
# matrix, limited range): their planes are copied as they are. Others (BT.709 or full range tags,
# other pixel formats) go through RGB, exactly as an RGB round trip would treat them.
_PLAIN_COLORSPACES = (2, 5, 6)  # AVCOL_SPC_UNSPECIFIED, BT470BG, SMPTE170M
_PLAIN_RANGES = (0, 1)  # unspecified, MPEG (limited)


def _to_i420(frame: av.VideoFrame) -> np.ndarray:
    if (frame.format.name == "yuv420p" and frame.colorspace in _PLAIN_COLORSPACES
            and frame.color_range in _PLAIN_RANGES):
        return frame.to_ndarray()
    return rgb_to_i420(frame.to_ndarray(format="rgb24"))


def i420_frame(height: int, width: int) -> tuple[av.VideoFrame, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A new yuv420p frame and writable numpy views of its (Y, U, V) planes, to fill in place (contents undefined)."""
    vf = av.VideoFrame(width, height, "yuv420p")
    planes = tuple(np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width] for p in vf.planes)
    return vf, planes  # type: ignore[return-value]


def rgb_to_i420(rgb: np.ndarray) -> np.ndarray:
    """One HxWx3 RGB frame (even H, W) as I420, converted as the encoder converts RGB it is handed."""
    return av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(format="yuv420p").to_ndarray()


def read_frames(
    path: str | Path,
    indices: Sequence[int] | None = None,
    start_time: float | None = None,
    end_time: float | None = None,
    pixel_format: str = "rgb24",
    threads: int | None = None,
) -> np.ndarray:
    """Frames `[T,H,W,3]` uint8 RGB of a video, or of its span [start_time, end_time) in seconds.

    `pixel_format="yuv420p"` returns I420 frames `[T,H*3/2,W]` instead (even sizes only): the
    decoder's planes as they are when they are plain BT.601 limited-range yuv420p, else
    converted through RGB. `threads`: decoder threads (None = frame and slice threads as the
    CPU allows; 1 = the least CPU time per frame, for callers that run one process per core).

    `indices` count frames from the start of the span (LeRobot v3: from the episode's first frame)
    and may be in any order or repeat; None = every frame of the span. We seek to the keyframe
    before `start_time` and decode forward, converting to RGB only the frames asked for (the
    conversion costs more than decoding at small sizes). A missing frame (truncated file), a
    decode error or a frame the decoder flags as damaged (damage in the middle of a file is
    otherwise decoded with concealment: grey blocks kept as data) raises `DatasetError` naming the
    file. Damage the codec cannot notice (it has no checksums) stays undetected.
    """
    if pixel_format == "rgb24":
        convert = RgbConverter()
    elif pixel_format == "yuv420p":
        convert = _to_i420
    else:
        raise ValueError(f"pixel_format must be rgb24 or yuv420p, got {pixel_format!r}")
    want = None if indices is None else sorted(set(int(i) for i in indices))
    if want is not None and want and want[0] < 0:
        raise DatasetError(f"video {path}: negative frame index {want[0]}")
    got: dict[int, np.ndarray] = {}
    every: list[np.ndarray] = []
    last = want[-1] if want else None
    want_s = frozenset(want or ())
    with _open(path) as c:
        if not c.streams.video:
            raise DatasetError(f"video {path} has no video stream")
        s = c.streams.video[0]
        if threads is None:
            s.thread_type = "AUTO"
        else:
            s.codec_context.thread_count = threads
        fps = float(s.average_rate or s.guessed_rate or 0) or 30.0
        half = 0.5 / fps  # timestamps are rounded to the time base: compare with half a frame slack
        t0 = start_time or 0.0
        if start_time and start_time > 0:
            c.seek(max(0, int((start_time - half) / float(s.time_base))), stream=s, backward=True, any_frame=False)
        n = 0
        try:
            for frame in c.decode(s):
                t = frame.time if frame.time is not None else n / fps
                if start_time is not None and t < t0 - half:
                    continue
                if end_time is not None and t >= end_time - half:
                    break
                if frame.is_corrupt:
                    raise DatasetError(f"video {path} is corrupt: frame {n} of the span is damaged (the decoder had "
                                       f"to conceal errors)")
                if want is None:
                    every.append(convert(frame))
                elif n in want_s:
                    got[n] = convert(frame)
                n += 1
                if last is not None and n > last:
                    break
        except av.error.FFmpegError as e:
            raise DatasetError(f"video {path} is corrupt: decoding failed after {n} frames ({_short(e)})") from None
    if want is None:
        if not every:
            raise DatasetError(f"video {path} has no frames in [{start_time}, {end_time})")
        return np.stack(every)
    if not want:
        return np.zeros((0, 0, 0, 3) if pixel_format == "rgb24" else (0, 0, 0), np.uint8)
    missing = [i for i in want if i not in got]
    if missing:
        raise DatasetError(f"video {path} is truncated: it has {n} frames in the span, frame {missing[0]} was asked for")
    return np.stack([got[int(i)] for i in indices])  # type: ignore[union-attr]


class RgbConverter:
    """Decoded frames to RGB arrays, the same pixels as `frame.to_ndarray(format="rgb24")`, through
    one conversion context kept for every frame of a read (each frame's own is set up anew: at
    small sizes that set-up costs about as much as the conversion)."""

    def __init__(self) -> None:
        from av.video.reformatter import VideoReformatter

        self.reformatter = VideoReformatter()

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        return self.reformatter.reformat(frame, format="rgb24").to_ndarray()


def _rate(fps: float) -> Fraction:
    return Fraction(fps).limit_denominator(1001)


# x264's macroblock tree (the rate control that spends fewer bits on blocks later frames do not
# reference) reads memory it never wrote (valgrind reports it inside x264_encoder_encode), so the
# same frames encoded with one thread came out as different bytes now and then (1 prepare run in
# 15 wrote a different clip). Off, no encode differed; the cost at crf 18 on 180x320 robot cameras
# is 4-17 % more bytes and 0.06-0.45 dB PSNR (benchmarks/x264_reproducibility.py).
REPRODUCIBLE_X264 = "mbtree=0"


class VideoWriter:
    """Streams frames into `<path>`, atomically: the final name appears only after `close()`.

    Use as a context manager; an exception inside the block removes the temp file. Disk full
    (ENOSPC) becomes `DatasetError` naming the file; nothing is left behind.
    """

    def __init__(self, path: str | Path, fps: float, codec: str = "libx264", crf: int | None = 18,
                 preset: str | None = None, threads: int = 0, pix_fmt: str = "yuv420p",
                 gop: int | None = None, options: dict[str, str] | None = None,
                 input_format: str = "rgb24") -> None:
        """`threads=1` makes x264's output the same bytes on every machine and every run (0 = as
        many as the CPU has: x264 then cuts frames into one slice per thread, so the bytes depend on
        the core count). With one thread x264's macroblock tree is also turned off (`REPRODUCIBLE_X264`).
        `input_format`: what `write` is given, "rgb24" (HxWx3) or "yuv420p" (I420 [H*3/2, W])."""
        if input_format not in ("rgb24", "yuv420p"):
            raise ValueError(f"input_format must be rgb24 or yuv420p, got {input_format!r}")
        self.path = Path(path)
        self.input_format = input_format
        self.fps, self.codec, self.crf, self.preset = fps, codec, crf, preset
        self.options = dict(options or {})  # further encoder options, e.g. {"svtav1-params": "lossless=1"}
        self.threads, self.pix_fmt, self.gop = threads, pix_fmt, gop
        self.tmp = temp_path(self.path)
        self._c: av.container.OutputContainer | None = None
        self._s = None
        self.count = 0

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, et, ev, tb) -> None:
        if et is None:
            self.close()
        else:
            self.abort()

    def _start(self, h: int, w: int) -> None:
        if h % 2 or w % 2:
            raise DatasetError(f"cannot write {self.path}: {h}x{w} frames must have even height and width")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._c = av.open(str(self.tmp), mode="w", format="mp4")
        opts: dict[str, str] = dict(self.options)
        if self.crf is not None:
            opts["crf"] = str(self.crf)
        if self.preset:
            opts["preset"] = str(self.preset)
        if self.threads == 1 and av.Codec(self.codec, "w").name == "libx264":  # "h264" names it too
            opts["x264-params"] = ":".join(filter(None, (REPRODUCIBLE_X264, opts.get("x264-params"))))  # the caller's own win
        s = self._c.add_stream(self.codec, rate=_rate(self.fps), options=opts)
        s.width, s.height, s.pix_fmt = w, h, self.pix_fmt
        if self.gop:
            s.gop_size = self.gop
        s.codec_context.thread_count = self.threads
        self._s = s

    def write(self, frame: np.ndarray | av.VideoFrame) -> None:
        """One uint8 frame in `input_format` (or a ready `av.VideoFrame`)."""
        try:
            self._encode(frame)
        except OSError as e:
            self.abort()
            raise output_error(e, self.path) from None
        self.count += 1

    def _encode(self, frame: np.ndarray | av.VideoFrame) -> None:
        if isinstance(frame, av.VideoFrame):
            vf = frame
            h, w = vf.height, vf.width
        else:
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format=self.input_format)
            h, w = vf.height, vf.width
        if self._c is None:
            self._start(h, w)
        vf.pts = None
        for pkt in self._s.encode(vf):
            self._c.mux(pkt)

    def close(self) -> Path:
        """Flush the encoder, fsync, and rename the temp file to the final name."""
        if self._c is None:
            raise DatasetError(f"cannot write {self.path}: no frames given")
        try:
            for pkt in self._s.encode(None):
                self._c.mux(pkt)
            self._c.close()
            self._c = None
            with open(self.tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(self.tmp, self.path)
        except OSError as e:
            self.abort()
            raise output_error(e, self.path) from None
        return self.path

    def abort(self) -> None:
        """Drop the temp file (best effort); the final name is never touched."""
        if self._c is not None:
            try:
                self._c.close()
            except Exception:
                pass
            self._c = None
        try:
            self.tmp.unlink()
        except OSError:
            pass


def write_video(path: str | Path, frames: np.ndarray | Iterable[np.ndarray], fps: float,
                codec: str = "libx264", crf: int | None = 18, preset: str | None = None,
                threads: int = 0) -> Path:
    """Write frames `[T,H,W,3]` uint8 RGB (or an iterable of HxWx3) to `path`, atomically."""
    with VideoWriter(path, fps, codec=codec, crf=crf, preset=preset, threads=threads) as w:
        for f in frames:
            w.write(f)
    return Path(path)


def check_encoder(codec: str, crf: int | None, preset: str | None, what: str = "video") -> None:
    """Encode two tiny frames in memory with these settings: a typo fails here, in one line, before any work.

    Why a trial encode: only the encoder knows its presets and ranges (x264 names them, SVT-AV1
    numbers them), and an error found after a run recorded its settings would poison the folder.
    """
    import io

    try:
        with av.open(io.BytesIO(), mode="w", format="mp4") as c:
            opts = {k: str(v) for k, v in (("crf", crf), ("preset", preset)) if v not in (None, "")}
            s = c.add_stream(codec, rate=15, options=opts)
            s.width, s.height, s.pix_fmt = 64, 64, "yuv420p"
            frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
            for f in (frame, frame, None):
                for pkt in s.encode(f):
                    c.mux(pkt)
    except (av.error.FFmpegError, ValueError) as e:
        raise ConfigError(f"{what}: codec {codec!r} with preset {preset!r} and crf {crf} cannot encode "
                          f"({_short(e)}): check the codec name and preset (x264: ultrafast ... medium ... "
                          f"veryslow; SVT-AV1: 0-13)") from None
