"""The calibration check on a scene it was not tuned on: the project's own tabletop with wide baselines.

Scene: tests/eval/project_rig.py (worldtune.scene's "hard" tabletop at 180x320, a second camera 30° and a third
78° around the table from the first), 32 frames through SVT-AV1 CRF 30 as LeRobot writes them, and through
worldtune's x264 writer with other textures and every camera 12 cm lower; and with the wall painted plain
(AV1), where across 78° SIFT finds few correct matches. Where the wall gives SIFT many correct matches, a wrong
calibration close to the truth (one camera turned 8° about the table) still has some matches on its lines, more
than chance puts there: that alone is not evidence for it, when a fit to the same matches puts several times as
many on one geometry. Where it does not, structured wrong matches can sit on a wrong calibration's lines beyond
chance (another pair's F, 7 where chance puts 0.8): still not evidence for it while a fit to them explains more.
"""

from __future__ import annotations

import pytest

from tests.eval.project_rig import H, ROLES, SETTINGS, W, calibrations, episode_views, through
from worldtune.eval.rig import PairReference, Reference
from worldtune.eval.sampson import SampsonError

pytestmark = pytest.mark.slow  # renders the project rig in three settings: 20-40 s of fixtures on 2 cores

FRAMES = 32
PAIRS = ("ext_0|ext_30", "ext_0|ext_78")


@pytest.fixture(scope="module", params=list(SETTINGS))
def checked(request, tmp_path_factory):
    setting = SETTINGS[request.param]
    raw, cams = episode_views(0, FRAMES, setting)
    folder = tmp_path_factory.mktemp("cal")
    views = {r: through(v, setting["codec"], setting["crf"], folder, r) for r, v in raw.items() if r in ("ext_0", "ext_30", "ext_78")}
    metric = SampsonError()
    out = {}
    for name, pairs in calibrations(cams, setting).items():
        pairs = {k: F for k, F in pairs.items() if k in PAIRS}
        base = Reference("ep0", {r: (H, W) for r in ROLES}, set(), {k: PairReference(F, "calibrated") for k, F in pairs.items()},
                         K={r: cams[r].K for r in ROLES})
        out[name] = metric.reference(views, "ep0", base=base).pairs
    return request.param, out


@pytest.mark.parametrize("pair", PAIRS, ids=["30deg", "78deg"])
def test_the_true_calibration_is_kept(checked, pair):
    p = checked[1]["right"][pair]
    assert p.F is not None, p.reason


def test_without_correct_matches_the_true_calibration_is_kept_and_says_why_frames_are_skipped(checked):
    name, checked = checked
    if name != "plain_wall_av1":
        pytest.skip("a textured wall gives the 78° pair enough correct matches")
    p = checked["right"]["ext_0|ext_78"]
    assert p.F is not None and p.checks["unverified"].startswith("too few correct matches to check it")
    assert "frames without matches that agree with it are skipped" in p.checks["unverified"]


@pytest.mark.parametrize("wrong", ["turned_8deg", "another_pair"])
@pytest.mark.parametrize("pair", PAIRS, ids=["30deg", "78deg"])
def test_a_wrong_calibration_is_dropped_though_some_matches_lie_on_its_lines(checked, pair, wrong):
    name, checked = checked
    if name == "plain_wall_av1" and wrong == "turned_8deg":
        pytest.skip("without correct matches nothing tells a camera turned 8° from the truth: kept unverified (below)")
    p = checked[wrong][pair]
    assert p.F is None, (f"{wrong} kept on {pair}: {p.checks.get('matches_within_0.5px')} matches on its lines, "
                         f"{p.checks.get('matches_fitting_the_clip')} on a fit's, {p.checks.get('by_chance_within_0.5px')} by chance")
    assert "calibration disagrees with the real clip" in p.reason
