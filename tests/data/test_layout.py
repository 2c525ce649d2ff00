import numpy as np
import pytest

from worldtune.data.layout import (GridLayout, SeparateLayout, SingleLayout, i420_exact, layout_from_dict,
                                   resize_frames, resize_i420, resize_transform)
from worldtune.data.video import i420_frame, i420_planes, rgb_to_i420
from worldtune.errors import ConfigError


def _views(h=36, w=64, t=3):
    rng = np.random.default_rng(0)
    return {r: rng.integers(0, 255, (t, h, w, 3), dtype=np.uint8) for r in ("exterior_1", "exterior_2", "wrist")}


def test_grid_pack_split_roundtrip_droid_default():
    g = GridLayout(height=72, width=128)
    v = _views()
    packed = g.pack(v)
    assert packed.shape == (3, 72, 128, 3) and g.cell_size() == (36, 64)
    back = g.split(packed)
    assert set(back) == set(v)
    for r in v:
        np.testing.assert_array_equal(back[r], v[r])  # same-size cells: exact
    assert packed[:, 36:, 64:].max() == 0  # bottom-right is black


def test_grid_split_of_other_size_and_dict_roundtrip():
    g = GridLayout(height=72, width=128)
    g2 = layout_from_dict(g.to_dict())
    assert g2 == g
    parts = g2.split(np.zeros((2, 432, 768, 3), np.uint8))
    assert parts["wrist"].shape == (2, 216, 384, 3)


def test_grid_rejects_bad_cells():
    with pytest.raises(ConfigError, match="outside"):
        GridLayout(cells={"a": (2, 0)})
    with pytest.raises(ConfigError, match="both"):
        GridLayout(cells={"a": (0, 0), "b": (0, 0)})
    with pytest.raises(ConfigError, match="divisible"):
        GridLayout(height=71, width=128)


def test_pad_letterboxes_and_crop_fills():
    img = np.full((1, 40, 40, 3), 200, np.uint8)
    pad = resize_frames(img, 20, 40, "pad")
    assert pad.shape == (1, 20, 40, 3)
    assert pad[0, :, :10].max() == 0 and pad[0, :, 10:30].min() == 200  # black bars left and right
    crop = resize_frames(img, 20, 40, "crop")
    assert crop.min() == 200


@pytest.mark.parametrize("mode", ["pad", "crop"])
def test_resize_transform_follows_a_pixel(mode):
    img = np.zeros((60, 100, 3), np.uint8)
    img[30:34, 70:74] = 255  # a 4x4 dot, centre (71.5, 31.5)
    out = resize_frames(img, 72, 96, mode)
    sx, sy, ox, oy = resize_transform((60, 100), (72, 96), mode)
    ys, xs = np.nonzero(out[..., 0] > 100)
    w = out[ys, xs, 0].astype(float)
    assert abs((xs * w).sum() / w.sum() - (sx * 71.5 + ox)) < 0.3
    assert abs((ys * w).sum() / w.sum() - (sy * 31.5 + oy)) < 0.3


def test_separate_and_single():
    v = _views()
    s = SeparateLayout(height=18, width=32)
    packed = s.pack(v)
    assert {k: a.shape for k, a in packed.items()} == {r: (3, 18, 32, 3) for r in v}
    stacked = np.concatenate([packed[r] for r in s.roles])
    assert all(np.array_equal(s.split(stacked)[r], packed[r]) for r in s.roles)
    assert layout_from_dict(s.to_dict()) == s
    one = SingleLayout("wrist", 18, 32)
    assert one.pack(v).shape == (3, 18, 32, 3) and list(one.split(one.pack(v))) == ["wrist"]
    assert layout_from_dict(one.to_dict()) == one


def test_view_size_for_grid_matches_the_grid_tokens():
    from worldtune.data.layout import view_size_for_grid

    assert view_size_for_grid(432, 768) == (256, 432)  # 3 x 16 x 27 = 27 x 48 tokens per latent frame, exactly
    h, w = view_size_for_grid(64, 112)
    assert (h, w) == (32, 64) and h % 16 == w % 16 == 0
    h, w = view_size_for_grid(480, 832)
    assert abs(3 * h * w - 480 * 832) / (480 * 832) < 0.05 and 1.5 < w / h < 2.0  # cell-like aspect


def test_compare_view_size_must_be_whole():
    from worldtune.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="view_width"):
        load_config(None, ["--compare.view_height", "256"])
    with pytest.raises(ConfigError, match="multiple of 16"):
        load_config(None, ["--compare.view_height", "250", "--compare.view_width", "432"])


def _smooth_rgb(t: int, h: int, w: int) -> np.ndarray:
    """Smooth colour ramps: what chroma subsampling keeps, so the two resize paths can be compared."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([np.stack([40 + 150 * x / w, 60 + 120 * y / h, 200 - 100 * (x + y) / (h + w) + 10 * k], -1)
                     for k in range(t)]).astype(np.uint8)


@pytest.mark.parametrize("src, dst, mode", [((48, 80), (24, 40), "pad"), ((48, 80), (36, 40), "pad"),
                                            ((48, 80), (24, 36), "crop"), ((36, 64), (72, 128), "pad")])
def test_resize_i420_has_the_rgb_geometry(src, dst, mode):
    """Planes resized in yuv420p land where the RGB resize puts the pixels, bars included (limited-range black).

    Luma matches everywhere; chroma away from the bar edges (the RGB path's encoder conversion
    bleeds one chroma row of picture colour into the bars, the plane path keeps them black).
    """
    assert i420_exact(src, *dst, mode)
    rgb = _smooth_rgb(2, *src)
    got = resize_i420(np.stack([rgb_to_i420(f) for f in rgb]), *dst, mode)
    want = np.stack([rgb_to_i420(f) for f in resize_frames(rgb, *dst, mode)])
    assert got.shape == want.shape == (2, dst[0] * 3 // 2, dst[1])
    (gy, gu, gv), (wy, wu, wv) = i420_planes(got), i420_planes(want)
    assert np.abs(gy.astype(int) - wy).max() <= 2
    bar = (wy == 16).reshape(2, dst[0] // 2, 2, dst[1] // 2, 2).any(axis=(2, 4))
    edge = bar | np.roll(bar, 1, 1) | np.roll(bar, -1, 1) | np.roll(bar, 1, 2) | np.roll(bar, -1, 2)
    assert (~edge).sum() > 0.4 * edge.size
    for g, w in ((gu, wu), (gv, wv)):
        assert np.abs(g.astype(int) - w)[~edge].max() <= 3
        assert (g[bar] == 128).all()


def test_i420_exact_refuses_half_chroma_pixels():
    assert not i420_exact((48, 80), 32, 56)  # 48x80 -> 32x53: an odd width
    assert not i420_exact((45, 80), 90, 160)  # odd source
    assert i420_exact((180, 320), 216, 384)  # DROID into its grid cell
    with pytest.raises(ConfigError, match="resize it as RGB"):
        resize_i420(np.zeros((1, 72, 80), np.uint8), 32, 56)


def test_tile_i420_places_cells_and_black():
    g = GridLayout(height=72, width=128)
    cells = {r: rgb_to_i420(np.full((36, 64, 3), v, np.uint8)) for r, v in zip(g.cells, (50, 120, 200))}
    vf, planes = i420_frame(72, 128)
    g.tile_i420(cells, planes)
    rgb = vf.to_ndarray(format="rgb24")
    for role in g.cells:
        tile = g.split(rgb[None])[role][0].astype(int)
        assert np.abs(tile - int(cells[role][0, 0] - 16) * 255 / 219).max() <= 3, role  # grey levels back
    assert rgb[36:, 64:].max() == 0  # the fourth cell is black
