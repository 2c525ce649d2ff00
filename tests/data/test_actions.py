"""Actions kept beside prepared clips: aligned rows, training-only statistics, domains, drops and bad input."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.numpy import load_file

from worldtune.config import ActionsConfig, PrepareConfig
from worldtune.data import actions as A
from worldtune.data import prepare as prep
from worldtune.errors import ConfigError, DatasetError

WRIST = "observation.images.wrist_left"


def _cfg(src, out, **actions) -> PrepareConfig:
    return PrepareConfig(source=str(src), out=str(out), cameras={"wrist": WRIST}, layout="single", height=32,
                         width=56, num_frames=9, stride=2, prompt_template="plain", workers=1, val_fraction=0.25,
                         actions=ActionsConfig(**{"key": "action", "state_key": "observation.state", **actions}))


def _columns(root) -> dict[int, dict[str, np.ndarray]]:
    """episode -> its action and state rows, straight from the data files."""
    t = pa.concat_tables([pq.read_table(f) for f in sorted((root / "data").rglob("*.parquet"))])
    out = {}
    for e in np.unique(t.column("episode_index").to_numpy()):
        m = (t.column("episode_index").to_numpy() == e)
        order = np.argsort(t.column("frame_index").to_numpy()[m])
        out[int(e)] = {k: np.asarray(t.column(c).to_pylist(), np.float32)[m][order]
                       for k, c in (("action", "action"), ("state", "observation.state"))}
    return out


def test_prepare_keeps_actions_aligned_with_each_clip(v3_root, tmp_path):
    out = tmp_path / "ds"
    rep = prep.run(_cfg(v3_root, out), quiet=True)
    assert rep["counts"]["dropped"] == {"too_short": 1}  # episode 3 (10 frames) is shorter than 17
    src = _columns(v3_root)
    rows = pq.read_table(out / "manifest.parquet").to_pylist()
    for r in rows:
        f = load_file(out / "actions" / f"{r['clip_id']}.safetensors")
        s, e = r["start_frame"], r["end_frame"]
        assert np.array_equal(f["action"], src[r["episode_index"]]["action"][s:e])
        assert np.array_equal(f["state"], src[r["episode_index"]]["state"][s:e])
        chunk = A.clip_chunk(f["action"], r["stride"])  # the action at each clip frame but the last
        assert np.array_equal(chunk, src[r["episode_index"]]["action"][s:e - 1:2]) and len(chunk) == 8
    index = A.read_index(out)
    assert index["domain"] == {"name": "worldtune_synthetic_gantry_4d", "id": 31, "width": 4, "new": True}
    assert index["normalization"] == "quantile" and index["names"] == ["x", "y", "z", "gripper"]
    train = sorted({r["episode_index"] for r in rows if r["split"] == "train"})
    val = {r["episode_index"] for r in rows if r["split"] == "val"}
    assert val and len(train) == 3 and index["stats_episodes"] == 3
    every = np.concatenate([src[e]["action"] for e in train]).astype(np.float64)
    assert np.allclose(index["stats"]["action"]["mean"], every.mean(0))  # training episodes only
    assert not np.allclose(index["stats"]["action"]["mean"],
                           np.concatenate([src[e]["action"] for e in train + sorted(val)]).mean(0))
    assert json.loads((out / "info.json").read_text())["actions"]["domain"]["id"] == 31
    prep.run(_cfg(v3_root, out).model_copy(update={"actions": ActionsConfig()}), quiet=True)  # rerun without
    assert not (out / A.INDEX).exists() and json.loads((out / "info.json").read_text())["actions"] is None


def test_missing_and_nonfinite_actions_are_dropped_and_counted(v3_copy, tmp_path):
    f = min((v3_copy / "data").rglob("*.parquet"))  # episodes 0 and 1
    t = pq.read_table(f)
    acts = t.column("action").to_pylist()
    eps = t.column("episode_index").to_pylist()
    acts[eps.index(0) + 5][2] = float("nan")
    acts[eps.index(1) + 3] = None
    t = t.set_column(t.schema.get_field_index("action"), "action", pa.array(acts, t.schema.field("action").type))
    pq.write_table(t, f)
    rep = prep.run(_cfg(v3_copy, tmp_path / "ds"), quiet=True)
    assert rep["counts"]["dropped"] == {"too_short": 1, "missing_actions": 1, "nonfinite_actions": 1}
    assert rep["dropped_episodes"]["nonfinite_actions"] == [0] and rep["dropped_episodes"]["missing_actions"] == [1]


def test_bad_action_input_is_a_one_line_error_naming_the_file(v3_root, v3_copy, tmp_path):
    info = v3_root / "meta" / "info.json"
    with pytest.raises(DatasetError, match=f"{info} has no feature 'actions'.*set prepare.actions.key"):
        prep.run(_cfg(v3_root, tmp_path / "a", key="actions"), quiet=True)
    with pytest.raises(ConfigError, match=f"{info}: actions are 4-D but domain 'droid_lerobot' takes 10-D"):
        prep.run(_cfg(v3_root, tmp_path / "b", domain="droid_lerobot"), quiet=True)
    with pytest.raises(ConfigError, match="domain_id = 8 is not a free"):
        prep.run(_cfg(v3_root, tmp_path / "c", domain_id=8), quiet=True)
    f = max((v3_copy / "data").rglob("*.parquet"))
    t = pq.read_table(f)
    wide = [a + [0.0] for a in t.column("action").to_pylist()]
    pq.write_table(t.set_column(t.schema.get_field_index("action"), "action", pa.array(wide)), f)
    with pytest.raises(DatasetError, match=f"{f}: row 0 of 'action' has 5 entries, info.json says 4"):
        prep.run(_cfg(v3_copy, tmp_path / "d"), quiet=True)
    assert not any((tmp_path / n).exists() for n in "abcd")  # nothing written before the input was checked
    with pytest.raises(DatasetError, match="clip 7: action step 1 entry 2 is inf"):
        A.check_chunk(np.array([[0, 0, 0, 0], [0, 0, np.inf, 0]]), 4, "clip 7")
    with pytest.raises(DatasetError, match=r"clip 7: actions of shape \[2, 3\], the domain takes \[T, 4\]"):
        A.check_chunk(np.zeros((2, 3)), 4, "clip 7")


@pytest.mark.parametrize("method", ["quantile", "minmax", "meanstd"])
def test_normalisation_round_trips_in_numpy_and_torch(method):
    x = np.random.default_rng(0).normal([0, 5, -3], [1, 0.1, 10], (500, 3)).astype(np.float32)
    stats = A.column_stats([x[:250], x[250:]], 3)
    y = A.normalize(x, stats, method)
    if method == "quantile":
        assert np.allclose(np.quantile(y, [0.01, 0.99], axis=0), [[-1] * 3, [1] * 3], atol=1e-5)
    if method == "meanstd":
        assert np.allclose(y.mean(0), 0, atol=1e-5) and np.allclose(y.std(0), 1, atol=1e-4)
    assert np.allclose(A.denormalize(y, stats, method), x, atol=1e-4)
    assert torch.allclose(A.normalize(torch.from_numpy(x), stats, method), torch.from_numpy(y), atol=1e-6)
    assert A.normalize(x, stats, "none") is x
