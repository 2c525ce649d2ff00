"""Multi-view generation on the tiny model: three view videos come out, and cross-view Sampson runs on them.

The numbers are meaningless on an untrained tiny model; what is checked is that the pipeline runs,
writes one mp4 per view, and that every frame pair is either scored or skipped with a reason. A
one-view run must equal worldtune's pipeline-equivalent sampler for the same noise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from worldtune.data.video import read_frames
from worldtune.errors import GenerationError
from worldtune.infer.multiview import crossview_sampson, generate_multiview
from worldtune.models.multiview import MultiViewTransformer

from tests.infer.conftest import H, W, random_frames

ROLES = ["exterior_1", "exterior_2", "wrist"]
F = 5  # 2 latent frames per view


pytestmark = pytest.mark.usefixtures("one_thread")


def _first_frames() -> dict[str, np.ndarray]:
    return {r: random_frames(1, seed=i)[0] for i, r in enumerate(ROLES)}


def test_three_views_written_and_scored(tiny_pipe, tmp_path):
    mv = MultiViewTransformer(tiny_pipe.transformer, 3, roles=ROLES)
    res = generate_multiview(tiny_pipe, mv, _first_frames(), "A robot picks up the cube.", seed=0, steps=2,
                             guidance=3.0, num_frames=F, out=tmp_path, fps=16, max_sequence_length=256)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{r}.mp4" for r in sorted(ROLES)]
    for r in ROLES:
        assert res.frames[r].shape == (F, H, W, 3) and res.frames[r].dtype == np.uint8
        assert read_frames(res.paths[r]).shape == (F, H, W, 3)
    assert not np.array_equal(res.frames["exterior_1"], res.frames["exterior_2"])
    scores = crossview_sampson(res.frames)
    assert set(scores) == {"exterior_1|exterior_2", "exterior_1|wrist", "exterior_2|wrist"}
    for s in scores.values():
        assert s["pairs"] + s["skipped"] == F  # every time step scored or skipped with a reason
        assert s["skipped"] == sum(s["skip_reasons"].values())


def test_one_view_equals_single_view_sampler(tiny_pipe):
    from worldtune.models.predict_sampler import decode, denoise, prepare

    frame = random_frames(1, seed=3)
    mv = MultiViewTransformer(tiny_pipe.transformer, 1, roles=["cam"])
    res = generate_multiview(tiny_pipe, mv, {"cam": frame[0]}, "A robot.", seed=7, steps=2, guidance=3.0,
                             num_frames=F, max_sequence_length=256)
    noise = torch.randn((1, 16, 2, H // 8, W // 8), generator=torch.Generator().manual_seed(7))
    cond = prepare(tiny_pipe, frame, noise, F, H, W)
    emb = [tiny_pipe.encode_prompt(p, do_classifier_free_guidance=False, max_sequence_length=256)[0]
           for p in ("A robot.", "")]
    ref = decode(tiny_pipe, denoise(tiny_pipe, cond, emb[0], emb[1], steps=2, guidance=3.0), F)
    ref = (np.clip(ref, 0, 1) * 255).round().astype(np.uint8)
    assert np.abs(res.frames["cam"].astype(int) - ref.astype(int)).max() <= 1


def test_missing_view_is_a_one_line_error(tiny_pipe):
    mv = MultiViewTransformer(tiny_pipe.transformer, 3, roles=ROLES)
    frames = _first_frames()
    frames.pop("wrist")
    with pytest.raises(GenerationError, match="one first frame per view"):
        generate_multiview(tiny_pipe, mv, frames, "x", steps=1, num_frames=F)


def test_adapter_and_inputs_must_agree_on_views(tiny_pipe, adapter_dir, tmp_path):
    """A packed-frame adapter for separate views, or a multi-view adapter for packed frames: refused up front."""
    from worldtune.infer.adapters import check_adapter
    from worldtune.infer.multiview import check_adapters_for_views
    from worldtune.models.multiview import save_multiview_extras

    packed = check_adapter(str(adapter_dir), tiny_pipe.transformer, "packed", 1.0)
    with pytest.raises(GenerationError, match="no multiview.json"):
        check_adapters_for_views([packed], ROLES)
    check_adapters_for_views([packed], None)  # packed inputs: fine

    import shutil

    mv_dir = tmp_path / "mv_adapter"
    shutil.copytree(adapter_dir, mv_dir)
    save_multiview_extras(mv_dir, MultiViewTransformer(tiny_pipe.transformer, 3, roles=ROLES))
    views = check_adapter(str(mv_dir), tiny_pipe.transformer, "views", 1.0)
    check_adapters_for_views([views], ROLES)
    with pytest.raises(GenerationError, match="trained on separate camera views"):
        check_adapters_for_views([views], None)
    with pytest.raises(GenerationError, match="trained on views"):
        check_adapters_for_views([views], ["left", "right", "wrist"])
