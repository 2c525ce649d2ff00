"""How cameras become model input: a grid of tiles, separate streams, or a single camera.

Why a class per layout: the same object packs cameras at preparation time and splits generated
videos back into cameras at generation/evaluation time, and it is stored in the prepared
dataset's info.json (`to_dict` / `layout_from_dict`) so later stages need nothing else.

Resize policy (both keep the aspect ratio; OpenCV INTER_AREA when shrinking, INTER_LINEAR when
growing):
- `"pad"` (default): scale the whole frame to fit inside the target and letterbox with black.
  Nothing is lost; DROID's 180x320 fits a 16:9 cell exactly, so no bars appear there.
- `"crop"`: scale to cover the target and cut the centre. No black bars; the borders are lost.
`resize_transform` gives the (scale, offset) each policy applies, so camera intrinsics can follow:
K' = [[sx*fx, 0, sx*cx + ox], [0, sy*fy, sy*cy + oy], [0, 0, 1]].

Frames are RGB `[T,H,W,3]`. For `prepare`, which keeps the decoder's yuv420p planes (I420
`[T,H*3/2,W]`, video.py) from decoder to encoder without a colour conversion, `resize_i420` fits
planes with the same geometry as `resize_frames` and `GridLayout.tile_i420` tiles them;
`i420_exact` says when that geometry lands on whole chroma pixels (even sizes and offsets), and
`prepare` resizes in RGB otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

import cv2
import numpy as np

from worldtune.data.video import i420_planes, rgb_to_i420
from worldtune.errors import ConfigError

Resize = Literal["pad", "crop"]
Frames = np.ndarray  # [T, H, W, 3] uint8 RGB, or [T, H*3/2, W] uint8 I420
Y_BLACK, CHROMA_ZERO = 16, 128  # limited-range black in yuv420p (what RGB black converts to)

DEFAULT_CELLS: dict[str, tuple[int, int]] = {"exterior_1": (0, 0), "exterior_2": (0, 1), "wrist": (1, 0)}


def resize_transform(src_hw: tuple[int, int], dst_hw: tuple[int, int],
                     mode: Resize = "pad") -> tuple[float, float, float, float]:
    """(sx, sy, ox, oy): where `resize_frames` puts a source pixel, x' = sx*x + ox, y' = sy*y + oy.

    Pixel centres are at integer coordinates (OpenCV's convention), hence the (s-1)/2 terms.
    """
    (sh, sw), (dh, dw) = src_hw, dst_hw
    s = min(dh / sh, dw / sw) if mode == "pad" else max(dh / sh, dw / sw)
    nh, nw = _scaled(sh, sw, s, dh, dw, mode)
    sx, sy = nw / sw, nh / sh
    if mode == "pad":
        x0, y0 = (dw - nw) // 2, (dh - nh) // 2
    else:
        x0, y0 = -((nw - dw) // 2), -((nh - dh) // 2)
    return sx, sy, x0 + (sx - 1) / 2, y0 + (sy - 1) / 2


def _scaled(sh: int, sw: int, s: float, dh: int, dw: int, mode: Resize) -> tuple[int, int]:
    if mode == "pad":
        return min(dh, max(1, round(sh * s))), min(dw, max(1, round(sw * s)))
    return max(dh, round(sh * s)), max(dw, round(sw * s))


def _geometry(sh: int, sw: int, height: int, width: int, mode: Resize) -> tuple[int, int, int, int, int]:
    """(nh, nw, y0, x0, interpolation): the scaled size and the pad offset (pad) or cut offset (crop)."""
    s = min(height / sh, width / sw) if mode == "pad" else max(height / sh, width / sw)
    nh, nw = _scaled(sh, sw, s, height, width, mode)
    y0, x0 = ((height - nh) // 2, (width - nw) // 2) if mode == "pad" else ((nh - height) // 2, (nw - width) // 2)
    return nh, nw, y0, x0, cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR


def _fit(src: np.ndarray, dst: np.ndarray, nh: int, nw: int, y0: int, x0: int, interp: int, mode: Resize) -> None:
    """Resize one image (or plane) to nh x nw and pad it into / cut it to `dst`."""
    r = cv2.resize(src, (nw, nh), interpolation=interp)
    if mode == "pad":
        dst[y0:y0 + nh, x0:x0 + nw] = r
    else:
        dst[...] = r[y0:y0 + dst.shape[0], x0:x0 + dst.shape[1]]


def resize_frames(frames: Frames, height: int, width: int, mode: Resize = "pad") -> Frames:
    """Resize `[T,H,W,3]` (or one HxWx3) to height x width keeping aspect: letterbox or centre crop."""
    one = frames.ndim == 3
    fr = frames[None] if one else frames
    t, sh, sw = fr.shape[:3]
    if (sh, sw) == (height, width):
        return frames
    nh, nw, y0, x0, interp = _geometry(sh, sw, height, width, mode)
    out = np.zeros((t, height, width, 3), np.uint8)
    for i in range(t):
        _fit(fr[i], out[i], nh, nw, y0, x0, interp, mode)
    return out[0] if one else out


def i420_exact(src_hw: tuple[int, int], height: int, width: int, mode: Resize = "pad") -> bool:
    """Can `resize_i420` give a source of this size exactly `resize_frames`' geometry (even sizes, offsets)?"""
    sh, sw = src_hw
    if sh % 2 or sw % 2 or height % 2 or width % 2:
        return False
    return (sh, sw) == (height, width) or all(v % 2 == 0 for v in _geometry(sh, sw, height, width, mode)[:4])


def resize_i420(frames: Frames, height: int, width: int, mode: Resize = "pad") -> Frames:
    """Resize I420 frames `[T,h*3/2,w]` like `resize_frames`: Y at full, U and V at half resolution.

    Letterbox bars are limited-range black (Y 16, U = V = 128). Needs `i420_exact`.
    """
    t, sh, sw = frames.shape[0], frames.shape[1] * 2 // 3, frames.shape[2]
    if (sh, sw) == (height, width):
        return frames
    if not i420_exact((sh, sw), height, width, mode):
        raise ConfigError(f"a {sh}x{sw} yuv420p frame cannot be fitted to {height}x{width} on whole chroma pixels: "
                          "resize it as RGB")
    nh, nw, y0, x0, interp = _geometry(sh, sw, height, width, mode)
    out = np.empty((t, height * 3 // 2, width), np.uint8)
    planes = tuple(zip(i420_planes(frames), i420_planes(out), (1, 2, 2)))
    if mode == "pad":
        out[:, :height] = Y_BLACK
        out[:, height:] = CHROMA_ZERO
    for i in range(t):
        for src, dst, k in planes:
            _fit(src[i], dst[i], nh // k, nw // k, y0 // k, x0 // k, interp, mode)
    return out


def fit_i420(frames: Frames, planes: bool, height: int, width: int, mode: Resize = "pad") -> Frames:
    """One camera's decoded frames fitted to height x width as I420 `[T, height*3/2, width]`.

    `planes`: the frames are the decoder's I420 and `i420_exact` holds for their size, so each
    plane is resized as it is; otherwise they are RGB `[T,h,w,3]`, resized in RGB and converted
    once, as the encoder would convert them. Either way the result tiles (`tile_i420`) or encodes
    without a further conversion.
    """
    if planes:
        return resize_i420(frames, height, width, mode)
    return np.stack([rgb_to_i420(f) for f in resize_frames(frames, height, width, mode)])


@dataclass
class GridLayout:
    """Cameras tiled in a rows x cols grid; `cells` maps role -> (row, col); other cells are black.

    Default: DROID's 2x2 grid (top-left exterior_1, top-right exterior_2, bottom-left wrist,
    bottom-right black). `height`/`width` are the whole grid frame's size.
    """

    rows: int = 2
    cols: int = 2
    cells: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_CELLS))
    height: int | None = None
    width: int | None = None
    resize: Resize = "pad"
    kind = "grid"

    def __post_init__(self) -> None:
        self.cells = {r: (int(c[0]), int(c[1])) for r, c in self.cells.items()}
        seen: dict[tuple[int, int], str] = {}
        for role, (r, c) in self.cells.items():
            if not (0 <= r < self.rows and 0 <= c < self.cols):
                raise ConfigError(f"grid cell {role} -> [{r}, {c}] is outside a {self.rows}x{self.cols} grid")
            if (r, c) in seen:
                raise ConfigError(f"grid cell [{r}, {c}] is given to both {seen[(r, c)]} and {role}")
            seen[(r, c)] = role
        if self.height is not None and self.width is not None:
            self.cell_size(self.height, self.width)

    @property
    def roles(self) -> list[str]:
        return list(self.cells)

    def cell_size(self, height: int | None = None, width: int | None = None) -> tuple[int, int]:
        """(height, width) of one tile of a height x width grid frame."""
        h, w = height or self.height, width or self.width
        if h is None or w is None:
            raise ConfigError("the grid has no target size: pass height and width")
        if h % self.rows or w % self.cols:
            raise ConfigError(f"grid size {h}x{w} is not divisible into {self.rows}x{self.cols} cells")
        return h // self.rows, w // self.cols

    def pack(self, views: dict[str, Frames], height: int | None = None, width: int | None = None) -> Frames:
        """{role: [T,h,w,3]} -> one [T,H,W,3] grid video; each view resized into its cell."""
        ch, cw = self.cell_size(height, width)
        missing = [r for r in self.cells if r not in views]
        if missing:
            raise ConfigError(f"grid needs cameras {missing} that were not given")
        t = min(len(v) for v in views.values())
        out = np.zeros((t, ch * self.rows, cw * self.cols, 3), np.uint8)
        for role, (r, c) in self.cells.items():
            out[:, r * ch:(r + 1) * ch, c * cw:(c + 1) * cw] = resize_frames(views[role][:t], ch, cw, self.resize)
        return out

    def tile_i420(self, cells: dict[str, np.ndarray], planes: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Write one grid frame into (Y, U, V) planes: each role's I420 cell `[ch*3/2, cw]`, black elsewhere.

        The cells come already at cell size (`resize_i420`); writing straight into the encoder's
        frame buffers makes one copy per pixel and no grid-sized temporary array.
        """
        h, w = planes[0].shape
        ch, cw = self.cell_size(h, w)
        used = {cell: role for role, cell in self.cells.items()}
        for r, c in itertools.product(range(self.rows), range(self.cols)):
            role = used.get((r, c))
            src = i420_planes(cells[role]) if role is not None else (Y_BLACK, CHROMA_ZERO, CHROMA_ZERO)
            for value, dst, k in zip(src, planes, (1, 2, 2)):
                dst[r * ch // k:(r + 1) * ch // k, c * cw // k:(c + 1) * cw // k] = value

    def split(self, video: Frames) -> dict[str, Frames]:
        """A grid video (any size, e.g. a generated one) -> {role: its cell}, by proportional bounds."""
        _, h, w = video.shape[:3]
        out = {}
        for role, (r, c) in self.cells.items():
            y0, y1 = r * h // self.rows, (r + 1) * h // self.rows
            x0, x1 = c * w // self.cols, (c + 1) * w // self.cols
            out[role] = video[:, y0:y1, x0:x1]
        return out

    def to_dict(self) -> dict:
        return {"type": "grid", "rows": self.rows, "cols": self.cols,
                "cells": {k: list(v) for k, v in self.cells.items()},
                "height": self.height, "width": self.width, "resize": self.resize}


@dataclass
class SeparateLayout:
    """One stream per camera, each resized to height x width (the multi-view model's input).

    `pack` returns {role: frames}. `split` accepts that dict back, or one video holding the views
    one after another along time in `roles` order (how the multi-view model sequences them).
    """

    roles: list[str] = field(default_factory=lambda: list(DEFAULT_CELLS))
    height: int | None = None
    width: int | None = None
    resize: Resize = "pad"
    kind = "separate"

    def cell_size(self, height: int | None = None, width: int | None = None) -> tuple[int, int]:
        h, w = height or self.height, width or self.width
        if h is None or w is None:
            raise ConfigError("the layout has no target size: pass height and width")
        return h, w

    def pack(self, views: dict[str, Frames], height: int | None = None, width: int | None = None) -> dict[str, Frames]:
        h, w = self.cell_size(height, width)
        missing = [r for r in self.roles if r not in views]
        if missing:
            raise ConfigError(f"layout needs cameras {missing} that were not given")
        return {r: resize_frames(views[r], h, w, self.resize) for r in self.roles}

    def split(self, video: Frames | dict[str, Frames]) -> dict[str, Frames]:
        if isinstance(video, dict):
            return {r: video[r] for r in self.roles}
        n = len(self.roles)
        if len(video) % n:
            raise ConfigError(f"a {len(video)}-frame video cannot hold {n} views of equal length")
        t = len(video) // n
        return {r: video[i * t:(i + 1) * t] for i, r in enumerate(self.roles)}

    def to_dict(self) -> dict:
        return {"type": "separate", "roles": list(self.roles), "height": self.height, "width": self.width,
                "resize": self.resize}


def view_size_for_grid(height: int, width: int, cells: tuple[int, int] = (2, 2), views: int = 3,
                       multiple: int = 16) -> tuple[int, int]:
    """A per-view size (multiples of 16) whose V views hold about the tokens of one packed grid frame.

    For comparing a grid model with a separate-views model at equal compute: V x h x w should be
    close to H x W, and the view's aspect close to a grid cell's. 432x768 gives 256x432 (equal
    tokens exactly), the demo's 64x112 gives 32x64 (86% of the tokens, the closest with a cell-like aspect).
    """
    target, aspect = height * width, (width / cells[1]) / (height / cells[0])

    def cost(hw: tuple[int, int]) -> float:
        h, w = hw
        return abs(views * h * w - target) / target + abs(np.log((w / h) / aspect))

    sizes = [(h, w) for h in range(multiple, height + 1, multiple) for w in range(multiple, width + 1, multiple)]
    if not sizes:
        raise ConfigError(f"a {height}x{width} grid is smaller than one {multiple}x{multiple} view")
    return min(sizes, key=cost)


@dataclass
class SingleLayout:
    """One camera, resized to height x width."""

    role: str = "exterior_1"
    height: int | None = None
    width: int | None = None
    resize: Resize = "pad"
    kind = "single"

    @property
    def roles(self) -> list[str]:
        return [self.role]

    def cell_size(self, height: int | None = None, width: int | None = None) -> tuple[int, int]:
        h, w = height or self.height, width or self.width
        if h is None or w is None:
            raise ConfigError("the layout has no target size: pass height and width")
        return h, w

    def pack(self, views: dict[str, Frames], height: int | None = None, width: int | None = None) -> Frames:
        if self.role not in views:
            raise ConfigError(f"layout needs camera {self.role}, got {sorted(views)}")
        h, w = self.cell_size(height, width)
        return resize_frames(views[self.role], h, w, self.resize)

    def split(self, video: Frames) -> dict[str, Frames]:
        return {self.role: video}

    def to_dict(self) -> dict:
        return {"type": "single", "role": self.role, "height": self.height, "width": self.width,
                "resize": self.resize}


Layout = GridLayout | SeparateLayout | SingleLayout


def layout_from_dict(d: dict) -> Layout:
    """Rebuild a layout from `to_dict()` output (the `layout` entry of a prepared info.json)."""
    kind = d.get("type")
    common = {"height": d.get("height"), "width": d.get("width"), "resize": d.get("resize", "pad")}
    if kind == "grid":
        return GridLayout(int(d.get("rows", 2)), int(d.get("cols", 2)),
                          {k: tuple(v) for k, v in d.get("cells", DEFAULT_CELLS).items()}, **common)
    if kind == "separate":
        return SeparateLayout(list(d["roles"]), **common)
    if kind == "single":
        return SingleLayout(str(d["role"]), **common)
    raise ConfigError(f"unknown layout type {kind!r}: expected grid, separate or single")
