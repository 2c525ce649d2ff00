"""Reference mode on a static rig whose matches fix F.

Scene: tests/eval/eval_scene.py's box corner (three textured planes: their matches fix F), seen by its two
exterior cameras and a third, nothing moving, 16 frames through x264 (worldtune's writer). Every frame
repeats the same matches; counted once over the clip, they all fell to the first frames' half of the
disjoint-frames check, the other half failed for lack of matches, and right references were declined.
The pair e2|e3's own matches give a wrong F (20 px off, a degenerate fit): it must stay declined. The
pair e1|e2's matches lie mostly on one wall: its right estimate is accepted through some encodes and
not others (benchmarks/sampson_encodes.py: 8 of the 12 right references of this rig accepted over
x264 and AV1 at CRF 18/28/35, no wrong one); this encode is not one of them, so it is not checked here.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.eval.droid_scene import distance_to_truth
from tests.eval.eval_scene import exterior_cams, look_at, render
from worldtune.eval.epipolar import fundamental_from_cameras
from worldtune.eval.sampson import SampsonConfig, SampsonError


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    from worldtune.data.video import write_video
    from worldtune.eval.video import read_video

    a, b = exterior_cams()
    cams = {"e1": a, "e2": b, "e3": look_at([0.9, -0.6, 1.3], [-0.3, 1.2, 0.2])}
    folder = tmp_path_factory.mktemp("box")
    views = {n: read_video(write_video(folder / f"{n}.mp4", np.stack([render(c)] * 16), 15, crf=18))[0]
             for n, c in cams.items()}
    ref = SampsonError(SampsonConfig(geometry="reference")).reference(views, "box")
    truth = {k: fundamental_from_cameras(cams[k[:2]].K, cams[k[:2]].R, cams[k[:2]].t, cams[k[3:]].K, cams[k[3:]].R,
                                         cams[k[3:]].t) for k in ref.pairs}
    return ref, truth


def test_a_right_reference_of_a_static_rig_is_accepted(box):
    """Before: declined, 'a fit on half of the frames fails (too_few_matches)'."""
    ref, truth = box
    pair = "e1|e3"
    p = ref.pairs[pair]
    assert p.F is not None, p.reason
    assert distance_to_truth(p.F, truth[pair]) < 1.0
    assert p.checks["estimate_error_px"] <= 1.0, p.checks  # the error the split fits imply for the estimate


def test_a_wrong_estimate_of_the_same_rig_stays_declined(box):
    ref, truth = box
    p = ref.pairs["e2|e3"]
    assert p.F is None or distance_to_truth(p.F, truth["e2|e3"]) < 1.0, p.summary()
