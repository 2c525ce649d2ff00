import numpy as np
import pytest

from worldtune.data.layout import (GridLayout, SeparateLayout, SingleLayout, layout_from_dict, resize_frames,
                                   resize_transform)
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
