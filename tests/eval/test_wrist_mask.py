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
