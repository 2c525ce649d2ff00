"""The whole-frame cross-view figure of one clip through several encodes of worldtune's own writer.

Scene: tests/eval/droid_scene.py (the 30° and the 78° pair, true calibration), 32 frames written by
`worldtune.data.video.write_video` (x264) at CRF 18, 28 and 35. A figure whose per-frame values fall
in two groups jumps between encodes (one group larger, then the other); this checks that the clip's
values are not bimodal on any encode and that the figure stays within 0.105 px across them. Measured
(docs/benchmarks.md): 0.111 / 0.142 / 0.211 px, 0.100 px apart, at the 0.1 px aim's edge (through AV1:
0.039 px); the rise at CRF 35 is the 30° pair localising worse on every frame. Before a frame read the
largest agreeing piece of its matches (`worldtune.eval.sampson.agreeing`) it was 0.113 / 0.148 / 0.230 px,
0.117 px apart, which this fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.eval.droid_scene import FIXED, H, W, DroidEpisode
from worldtune.eval.rig import PairReference, Reference
from worldtune.eval.sampson import SampsonError, two_groups

pytestmark = pytest.mark.slow  # three encodes, three references: ~30 s on 2 cores


def test_the_clip_figure_is_stable_and_not_bimodal_across_crf(tmp_path):
    from worldtune.data.video import write_video
    from worldtune.eval.video import read_video

    ep = DroidEpisode(0, 32)
    raw = ep.views(FIXED)
    base = Reference("ep0", {r: (H, W) for r in FIXED}, set(),
                     {k: PairReference(ep.F(*k.split("|")), "calibrated") for k in ("ext_a|ext_b", "ext_a|ext_c")})
    metric = SampsonError()
    values = {}
    for crf in (18, 28, 35):
        views = {r: read_video(write_video(tmp_path / f"{r}_{crf}.mp4", v, 15, crf=crf))[0] for r, v in raw.items()}
        score = metric.score_views(views, reference=metric.reference(views, "ep0", base=base))
        clip = score.overall("crossview")
        assert two_groups(clip.pair_medians) is None, (crf, clip.summary())
        assert "bimodal" not in clip.summary()
        values[crf] = clip.median
    assert np.isfinite(list(values.values())).all(), values
    assert max(values.values()) - min(values.values()) < 0.105, values
