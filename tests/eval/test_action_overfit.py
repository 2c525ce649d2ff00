"""The forward-dynamics overfit check (worldtune.eval.action_overfit): trained on four clips that share their first
frame and caption and differ only in the arm's path, seed-cosmos3 must learn to tell the paths apart by their actions
within a fixed budget; with the actions zeroed or shuffled inside the conditioning path, the same check must fail.

Measured values are in each test's docstring; the thresholds sit between the real path's figure and the broken
variants'.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

MODEL = "seed-cosmos3"
PATHS = 4
STEPS = 300  # the budget: batch 8, AdamW (the action-use recipe) at the learning rate below
OVERRIDES = ("--train.lr", "2e-3")
MIN_SHARE = 0.03  # of the paths' difference a perfect reader of the actions would account for
MIN_RATIO = 1.1  # every clip's loss under another path's chunk over its loss under its own


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """The check's clips, written, prepared and cached once; every check trains its own run on them."""
    from worldtune.eval.action_overfit import prepare_paths, write_model, write_paths

    out = tmp_path_factory.mktemp("overfit")
    write_paths(out, MODEL, PATHS)
    write_model(out, MODEL)
    prepare_paths(out, MODEL, OVERRIDES)
    return out


def check(clips: Path, steps: int = STEPS):
    from worldtune.eval.action_overfit import overfit_check

    return overfit_check(clips, MODEL, PATHS, steps, overrides=OVERRIDES)


def test_forward_dynamics_learns_to_tell_the_paths_apart_by_their_actions(clips):
    """The shipped seed starts nearly blind to its actions (learned share 0.0004: its loss under another path's chunk
    is 0.09 % above its own); after the budget every clip scores clearly worse under the other paths' chunks.
    Measured (2-core CPU, 2026-12-07): separation 1.27-1.30 (worst clip 1.20-1.26), learned share 0.050-0.057 at
    step 300 (two runs)."""
    result = check(clips)
    assert abs(result.before.learned_share) < 0.005 and result.before.ratio < 1.01, result.before.row()
    assert result.after.learned_share >= MIN_SHARE, result.row()
    assert result.after.min_clip_ratio >= MIN_RATIO, result.row()


def test_actions_zeroed_in_the_conditioning_path_fail_the_check(clips, monkeypatch):
    """A bug that zeroes the chunk on its way into the transformer: every chunk reads the same, so the losses under
    own and other chunks are equal and the learned share is exactly 0."""
    import worldtune.models.cosmos3_actions as actions

    padded = actions.padded_actions
    monkeypatch.setattr(actions, "padded_actions", lambda a, dim: padded(a, dim) * 0)
    result = check(clips, steps=20)
    assert result.after.learned_share == 0.0 and result.after.ratio == 1.0, result.row()


def test_actions_shuffled_across_the_batch_in_training_fail_the_check(clips, monkeypatch):
    """A bug that pairs each training clip with a random clip's chunk (a loader or collate mix-up): the model never
    sees which path goes with which actions, so after the same budget it has learned nothing that tells them apart,
    although the scoring feeds each clip its own chunk. Measured: separation 1.0000 (worst clip 0.9993), learned
    share 0.000 at step 300."""
    from worldtune.train.action_task import ActionTask

    predict = ActionTask.predict
    gen = torch.Generator().manual_seed(0)

    def shuffled(self, model, fb, text, actions, *args, **kwargs):
        order = torch.randperm(actions.shape[0], generator=gen)
        return predict(self, model, fb, text, actions[order], *args, **kwargs)

    monkeypatch.setattr(ActionTask, "predict", shuffled)
    result = check(clips)
    assert result.after.learned_share < MIN_SHARE / 3 and result.after.min_clip_ratio < MIN_RATIO, result.row()
