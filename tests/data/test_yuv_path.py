"""Property tests: prepare's yuv420p path (planes resized, tiled in I420) against resizing in RGB.

For many (source size, layout, output size, resize) combinations, sampled with a fixed seed plus
the DROID cases, the frame `prepare` would encode must equal what packing the RGB frames and
converting them once gives: luma within rounding everywhere, chroma within a few levels away from
black bars and cell borders (where the one conversion of the whole RGB grid mixes a neighbour's colour
into the border chroma rows). Odd chroma sizes (cells of 90 rows: 45 chroma rows) included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from worldtune.data.layout import (GridLayout, Layout, SeparateLayout, SingleLayout, fit_i420, i420_exact,
                                   resize_transform)
from worldtune.data.video import i420_frame, i420_planes, rgb_to_i420

ROLES = ("exterior_1", "exterior_2", "wrist")


@dataclass(frozen=True)
class Case:
    src: tuple[int, int]  # every camera's source size
    kind: str  # grid, separate, single
    grid: tuple[int, int]  # rows, cols (grid only)
    size: tuple[int, int]  # the layout's height, width (the whole grid frame for grid)
    mode: str

    def __str__(self) -> str:
        g = f"{self.grid[0]}x{self.grid[1]}-" if self.kind == "grid" else ""
        return f"{self.src[0]}x{self.src[1]}-{self.kind}-{g}{self.size[0]}x{self.size[1]}-{self.mode}"

    def layout(self) -> Layout:
        (h, w), (rows, cols) = self.size, self.grid
        if self.kind == "grid":
            cells = {r: (i // cols, i % cols) for i, r in enumerate(ROLES[:rows * cols])}
            return GridLayout(rows, cols, cells, h, w, self.mode)
        if self.kind == "separate":
            return SeparateLayout(list(ROLES), h, w, self.mode)
        return SingleLayout(ROLES[0], h, w, self.mode)


FIXED = [
    Case((180, 320), "grid", (2, 2), (180, 320), "pad"),  # DROID into a 180x320 grid: 90x160 cells
    Case((180, 320), "grid", (2, 2), (180, 320), "crop"),
    Case((180, 320), "grid", (2, 2), (216, 384), "pad"),  # 108-row cells: 54 chroma rows, even
    Case((180, 320), "separate", (1, 1), (90, 160), "pad"),
    Case((180, 320), "single", (1, 1), (180, 320), "pad"),  # no resize: the decoder's planes as they are
    Case((90, 160), "grid", (1, 3), (90, 480), "pad"),  # 45 chroma rows in and out
    Case((46, 82), "grid", (2, 2), (92, 164), "pad"),  # odd half sizes both ways (23x41 chroma)
    Case((45, 80), "grid", (2, 2), (180, 320), "pad"),  # an odd source: resized in RGB
]


def _sampled(planes: int = 40, rgb: int = 16, seed: int = 31) -> list[Case]:
    """Random combinations, `planes` of them on the plane path (`i420_exact`) and `rgb` on the RGB one:
    even cells of 4..100 pixels (half of them 2 mod 4: odd chroma sizes), sources of 8..120 (odd too)."""
    rng = np.random.default_rng(seed)
    out: dict[bool, list[Case]] = {True: [], False: []}
    while len(out[True]) < planes or len(out[False]) < rgb:
        kind = str(rng.choice(["grid", "grid", "separate", "single"]))
        rows, cols = (int(rng.integers(1, 3)), int(rng.integers(1, 4))) if kind == "grid" else (1, 1)
        ch, cw = (2 * int(rng.integers(2, 51)) for _ in range(2))
        src = (int(rng.integers(8, 121)), int(rng.integers(8, 121)))
        mode = str(rng.choice(["pad", "crop"]))
        exact = i420_exact(src, ch, cw, mode)
        if len(out[exact]) < (planes if exact else rgb):
            out[exact].append(Case(src, kind, (rows, cols), (ch * rows, cw * cols), mode))
    return out[True] + out[False]


CASES = FIXED + _sampled()


def _smooth_views(t: int, h: int, w: int) -> dict[str, np.ndarray]:
    """Smooth colour ramps, one per camera: what chroma subsampling keeps, so the two paths can be compared."""
    y, x = np.mgrid[0:h, 0:w]
    out = {}
    for k, role in enumerate(ROLES):
        frames = [np.stack([40 + 150 * x / w, 60 + 120 * y / h, 200 - 100 * (x + y) / (h + w) - 30 * k + 7 * i], -1)
                  for i in range(t)]
        out[role] = np.clip(np.stack(frames), 0, 255).astype(np.uint8)
    return out


def _yuv_path(case: Case, layout: Layout, views: dict[str, np.ndarray]) -> dict[str | None, np.ndarray]:
    """What prepare's worker makes of decoded frames: per camera I420 or RGB (as `i420_exact` decides),
    fitted by `fit_i420`, then tiled into the encoder's frame (grid) or encoded as they are."""
    ch, cw = layout.cell_size()
    cells = {}
    for role in layout.roles:
        planes = i420_exact(case.src, ch, cw, layout.resize)
        decoded = np.stack([rgb_to_i420(f) for f in views[role]]) if planes else views[role]
        cells[role] = fit_i420(decoded, planes, ch, cw, layout.resize)
    if not isinstance(layout, GridLayout):
        return cells
    frames = []
    for i in range(len(views[ROLES[0]])):
        vf, planes = i420_frame(layout.height, layout.width)
        layout.tile_i420({role: c[i] for role, c in cells.items()}, planes)
        frames.append(vf.to_ndarray())
    return {None: np.stack(frames)}


def _rgb_path(layout: Layout, views: dict[str, np.ndarray]) -> dict[str | None, np.ndarray]:
    """Resizing and tiling in RGB (`pack`), converted once as the encoder converts RGB."""
    packed = layout.pack(views)
    packed = packed if isinstance(packed, dict) else {(None if isinstance(layout, GridLayout) else layout.role): packed}
    return {k: np.stack([rgb_to_i420(f) for f in v]) for k, v in packed.items()}


def _border_chroma(h: int, w: int, layout: Layout) -> np.ndarray:
    """Chroma pixels next to a cell border of a grid frame (h x w luma)."""
    mask = np.zeros((h // 2, w // 2), bool)
    if isinstance(layout, GridLayout):
        ch, cw = layout.cell_size(h, w)
        for r in range(1, layout.rows):
            mask[r * ch // 2 - 1:r * ch // 2 + 1] = True
        for c in range(1, layout.cols):
            mask[:, c * cw // 2 - 1:c * cw // 2 + 1] = True
    return mask


def _near_black(y: np.ndarray) -> np.ndarray:
    """Chroma pixels whose 2x2 luma block, or a neighbouring block, holds letterbox black (Y 16)."""
    t, h, w = y.shape
    bar = (y == 16).reshape(t, h // 2, 2, w // 2, 2).any(axis=(2, 4))
    padded = np.pad(bar, ((0, 0), (1, 1), (1, 1)))
    return np.stack([padded[:, 1 + dy:1 + dy + h // 2, 1 + dx:1 + dx + w // 2]
                     for dy in (-1, 0, 1) for dx in (-1, 0, 1)]).any(axis=0)


def _chroma_bound(case: Case, layout: Layout) -> int:
    """Largest chroma difference allowed: 3 levels, 6 where a camera is grown more than 2x (its chroma,
    half the source's resolution, is then interpolated over several output pixels, the RGB path's from
    full-resolution colour; with these steep ramps on tiny sources that differs by up to 5)."""
    sx, sy = resize_transform(case.src, layout.cell_size(), case.mode)[:2]
    return 6 if max(sx, sy) > 2 else 3


@pytest.mark.parametrize("case", CASES, ids=str)
def test_yuv_path_equals_the_rgb_path(case: Case):
    layout = case.layout()
    views = _smooth_views(2, *case.src)
    got, want = _yuv_path(case, layout, views), _rgb_path(layout, views)
    assert got.keys() == want.keys()
    for key in want:
        g, w = got[key], want[key]
        assert g.shape == w.shape, (key, g.shape, w.shape)
        (gy, gu, gv), (wy, wu, wv) = i420_planes(g), i420_planes(w)
        assert np.abs(gy.astype(int) - wy).max() <= 2, key
        keep = ~(_near_black(wy) | _near_black(gy) | _border_chroma(*wy.shape[1:], layout))
        for gc, wc in ((gu, wu), (gv, wv)):
            err = np.abs(gc.astype(int) - wc)[keep]
            assert err.max(initial=0) <= _chroma_bound(case, layout), key
            assert err.size == 0 or err.mean() <= 1.5, key
        if isinstance(layout, GridLayout) and len(layout.cells) < layout.rows * layout.cols:  # an empty cell
            ch, cw = layout.cell_size()
            r, c = divmod(layout.rows * layout.cols - 1, layout.cols)
            assert (gy[:, r * ch:(r + 1) * ch, c * cw:(c + 1) * cw] == 16).all()
            assert (gu[:, r * ch // 2:(r + 1) * ch // 2, c * cw // 2:(c + 1) * cw // 2] == 128).all()


def test_sampled_cases_cover_odd_chroma_and_both_paths():
    """The sample holds what broke before: cells of 2 mod 4 rows (odd chroma rows), on either resize path."""
    def cell(c: Case) -> tuple[int, int]:
        return c.layout().cell_size()

    odd = [c for c in CASES if cell(c)[0] % 4 == 2]
    assert sum(i420_exact(c.src, *cell(c), c.mode) for c in odd) >= 5
    assert sum(not i420_exact(c.src, *cell(c), c.mode) for c in odd) >= 5
    assert sum(cell(c)[1] % 4 == 2 for c in odd) >= 5  # odd chroma columns too
    assert {c.kind for c in odd} == {"grid", "separate", "single"}


def test_i420_planes_of_odd_chroma_rows_are_writable_views():
    """A 90x160 I420 frame: U and V of 45x80 start in the middle of a packed row."""
    frames = np.zeros((2, 135, 160), np.uint8)
    y, u, v = i420_planes(frames)
    assert (y.shape, u.shape, v.shape) == ((2, 90, 160), (2, 45, 80), (2, 45, 80))
    u[:] = 1
    v[:] = 2
    flat = frames.reshape(2, -1)
    assert (flat[:, :90 * 160] == 0).all()
    assert (flat[:, 90 * 160:90 * 160 + 45 * 80] == 1).all() and (flat[:, 90 * 160 + 45 * 80:] == 2).all()


def test_i420_planes_of_a_strided_view_are_read_only_copies():
    """Rows that do not follow one another (a column slice) cannot be cut by bytes: the planes are a copy,
    read-only so that a write meant for the caller's array fails loudly instead of being lost."""
    wide = np.arange(2 * 135 * 320, dtype=np.uint32).astype(np.uint8).reshape(2, 135, 320)
    y, u, v = i420_planes(wide[:, :, :160])
    flat = np.ascontiguousarray(wide[:, :, :160]).reshape(2, -1)
    assert (u == flat[:, 90 * 160:90 * 160 + 45 * 80].reshape(2, 45, 80)).all()
    assert (y == wide[:, :90, :160]).all()
    with pytest.raises(ValueError, match="read-only"):
        u[:] = 0
