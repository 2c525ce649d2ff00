"""The camera-fixed mask of a wrist view that looks down at a plain table.

Scene: tests/eval/droid_scene.py with `wrist_down`: the wrist camera above the fingers looks down at
the plain table, only the two fingertips ride in view (about an eighth of it), AV1 as LeRobot writes
it. A mask must cover what moves with the camera (the fingers), not every pixel without texture: a
plain table changes little whether it moves or not, so it is no evidence of being camera-fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.eval.droid_scene import DroidEpisode, encode
from worldtune.eval.rig import camera_fixed_mask

FRAMES = 48


@pytest.fixture(scope="module", params=[0.003, 0.012], ids=["slow", "fast"])
def wrist(request):
    ep = DroidEpisode(0, FRAMES, request.param, wrist_down=True)
    frames = encode(np.stack([ep.render_view("wrist", i) for i in range(FRAMES)]))
    fingers = np.mean([ep.gripper_mask(i) for i in range(0, FRAMES, 8)], axis=0) > 0.5
    return ep, frames, fingers


def test_the_view_is_mostly_plain_table(wrist):
    _, _, fingers = wrist
    assert 0.05 < fingers.mean() < 0.2  # the fingertips: a small part of the view


def test_mask_covers_the_fingers_not_the_plain_table(wrist):
    """Before: 0.80 of the fast view masked (the plain table swallowed), 0.25 of the slow one."""
    _, frames, fingers = wrist
    usable = camera_fixed_mask(frames)
    assert usable is not None
    masked = 1 - usable.mean()
    assert (~usable)[fingers].mean() >= 0.95, "the fingers must be masked"
    assert masked < fingers.mean() + 0.2, f"{masked:.2f} of the view masked, fingers {fingers.mean():.2f}"


def _slowing_reach(n: int = 93, hold: float = 0.35) -> tuple[np.ndarray, np.ndarray]:
    """A wrist view sliding over a plain table and slowing down as it reaches a cube, the fingers fixed.

    Beyond the table's left border lies a wood-like floor; the cube creeps from the right of the view to
    between the fingers and rests there for the last `hold` of the clip (the view has stopped). The border
    and the cube cross many plain pixels once, slower and slower: over the clip such a pixel changes about
    as little as the fingers do, and its time-averaged gradient counts as texture. (T, H, W, 3) frames
    through AV1 as LeRobot writes them, and the true finger mask.
    """
    import cv2

    h, w = 180, 320
    rng = np.random.default_rng(0)
    world = np.full((2 * h, 2 * w, 3), 235, np.uint8)
    world[:, :70] = cv2.resize(rng.integers(60, 160, (2 * h // 6, 12)).astype(np.uint8), (70, 2 * h),
                               interpolation=cv2.INTER_NEAREST)[..., None]
    fingers = np.zeros((h, w), bool)
    fingers[155:] = True  # the hand
    fingers[130:155, 110:135] = fingers[130:155, 185:210] = True  # the fingertips
    reach = int(n * (1 - hold))
    cube0, cube1 = np.array([330.0, 150.0]), np.array([160.0, 135.0])
    start, end = np.array([40.0, 30.0]), np.array([90.0, 60.0])  # the view's corner on the table
    frames = []
    for t in range(n):
        s = 1 - (1 - min(t / reach, 1.0)) ** 2
        x, y = start + s * (end - start)
        f = cv2.warpAffine(world, np.float32([[1, 0, -x], [0, 1, -y]]), (w, h), flags=cv2.INTER_LINEAR)
        cx, cy = (cube0 + s * (cube1 - cube0)).astype(int)
        cv2.rectangle(f, (cx - 14, cy - 14), (cx + 14, cy + 14), (180, 40, 50), -1)
        f[fingers] = (70, 70, 75)
        f[155:] = (95, 95, 100)
        frames.append(f)
    return encode(np.stack(frames)), fingers


def test_mask_leaves_the_trails_of_edges_that_cross_the_view_once():
    """A table border and a cube that cross the view once are not camera-fixed, however slowly they go.

    Before: 0.08 of the view masked farther from the fingers than the mask's own margin (the border's trail
    down the whole view), as on robosuite's Lift wrist view where half of the mask lay off the gripper."""
    import cv2

    frames, fingers = _slowing_reach()
    usable = camera_fixed_mask(frames)
    assert usable is not None
    masked = ~usable
    k = max(3, int(round(0.05 * 320)) | 1)  # camera_fixed_mask's closing and margin at the default `grow`
    near = cv2.dilate(fingers.astype(np.uint8), np.ones((k, k), np.uint8)) > 0
    outline = fingers & (cv2.dilate((~fingers).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0)
    assert masked[outline].mean() >= 0.95, "the fingers' edges must be masked"
    assert (masked & ~near).mean() < 0.03, f"{(masked & ~near).mean():.3f} of the view masked away from the fingers"
