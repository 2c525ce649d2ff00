"""`trajectories.labeller = "cosmos3"`: generated videos labelled by Cosmos 3's inverse dynamics (tiny-cosmos3, base
and with a forward-dynamics adapter), denormalised with the dataset's statistics, compared with the IDM on held-out
clips; the IDM labeller still runs on the same folder; both outputs are valid LeRobot v3.0 datasets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from worldtune.config import load_config
from worldtune.data.lerobot import LeRobotDataset
from worldtune.idm.cosmos3 import windows

pytestmark = pytest.mark.usefixtures("domain_tables")
CAMERAS = {"exterior_1": "observation.images.exterior_1_left", "exterior_2": "observation.images.exterior_2_left",
           "wrist": "observation.images.wrist_left"}


def test_windows_cover_every_transition_once_first():
    for length, chunk in ((5, 4), (17, 16), (20, 16), (13, 4), (9, 8)):
        starts = windows(length, chunk)
        covered = sorted({t for s in starts for t in range(s, s + chunk)})
        assert covered == list(range(length - 1)) and all(s + chunk <= length - 1 for s in starts)


@pytest.fixture(scope="module")
def setup(fd_trained, tmp_path_factory):
    """A generation folder whose "generated" videos are the prepared held-out clips (so labels can be checked
    against their true actions), and a small IDM of the same cameras at the grid cells' size."""
    from worldtune.data.video import read_frames, write_video
    from worldtune.idm.train import run as idm_run
    from worldtune.infer.views import split_views

    base = tmp_path_factory.mktemp("c3label")
    ds = fd_trained["dataset"]
    info = json.loads((ds / "info.json").read_text())
    gen = base / "gen"
    gen.mkdir()
    (gen / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1,
                                               "layout": info["layout"], "fps": info["fps"], "dataset": str(ds)}))
    rows = []
    for r in (x for x in pq.read_table(ds / "manifest.parquet").to_pylist() if x["split"] == "val"):
        frames = read_frames(ds / r["video"])
        video, views = f"fd/{r['clip_id']}_s0.mp4", {}
        for role, tile in split_views(frames, info["layout"]).items():
            views[role] = f"fd/{r['clip_id']}_s0/{role}.mp4"
            write_video(gen / views[role], tile, info["fps"])
        write_video(gen / video, frames, info["fps"])
        rows.append({"model": "fd", "name": r["clip_id"], "seed": 0, "video": video, "views": views,
                     "instruction": r["task"], "prompt": r["task"], "params_hash": r["clip_id"]})
    (gen / "generations.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    idm = base / "idm"
    idm_run(load_config(None, ["--idm.dataset", str(fd_trained["lerobot"]), "--idm.out", str(idm),
                               "--idm.cameras", "{" + ", ".join(f'{r} = "{k}"' for r, k in CAMERAS.items()) + "}",
                               "--idm.view_height", "16", "--idm.view_width", "32", "--idm.steps", "20",
                               "--idm.log_every", "10"]))
    return {"gen": gen, "idm": idm, "clips": len(rows)}


def _cfg(fd_trained, setup, out: Path, *extra: str):
    return load_config(None, ["--model.path", str(fd_trained["model"]), "--trajectories.generations", str(setup["gen"]),
                              "--trajectories.idm", str(setup["idm"]), "--trajectories.out", str(out),
                              "--trajectories.cosmos3.steps", "1", *extra])


@pytest.mark.usefixtures("one_thread")
def test_cosmos3_and_idm_labellers_write_valid_datasets_and_the_comparison(fd_trained, setup, tmp_path):
    from worldtune.data import actions as A
    from worldtune.trajectories import run

    index = A.read_index(fd_trained["dataset"])
    c3 = run(_cfg(fd_trained, setup, tmp_path / "c3", "--trajectories.labeller", "cosmos3",
                  "--trajectories.cosmos3.adapter", str(fd_trained["adapter"])))
    idm = run(_cfg(fd_trained, setup, tmp_path / "idm"))
    for summary, kind in ((c3, "cosmos3"), (idm, "idm")):
        ds = LeRobotDataset(summary["out"])
        assert summary["labeller"]["kind"] == kind and len(ds.episodes) == setup["clips"] == summary["episodes"]["synthetic"]
        table = pq.read_table(next(Path(summary["out"], "data").rglob("*.parquet")))
        acts = np.asarray(table.column("action").to_pylist(), np.float32)
        assert acts.shape == (sum(e.length for e in ds.episodes), 4) and np.isfinite(acts).all()
        assert set(ds.cameras) == set(CAMERAS.values())
    # the labeller undoes the scaling the adapter was trained with (the next test checks the arithmetic)
    assert c3["labeller"]["normalization"] == index["normalization"] == "quantile" and c3["labeller"]["chunk"] == 4
    provenance = json.loads((Path(c3["out"]) / "meta" / "worldtune_trajectories.json").read_text())
    comp = provenance["labeller_comparison"]
    assert set(comp["labellers"]) == {"cosmos3", "idm", "mean_action"} and "note" not in comp
    assert comp["transitions"] == 4 * len(comp["clips"]) and len(comp["episodes"]) == 3
    for row in comp["labellers"].values():
        assert set(row["mse"]) == set(comp["action_names"]) == {"x", "y", "z", "gripper"}
        assert np.isclose(row["mse_overall"], np.mean(list(row["mse"].values())))
    assert "labeller_comparison" not in json.loads((Path(idm["out"]) / "meta" / "worldtune_trajectories.json").read_text())


def test_cosmos3_labels_are_denormalised_with_the_dataset_statistics(fd_trained, setup, monkeypatch, tmp_path):
    """The base model (no adapter) scales with the dataset's actions.json: a model that answered the middle of
    the normalised range everywhere gives, per entry, the middle of the dataset's q01..q99 range."""
    from worldtune.data import actions as A
    from worldtune.trajectories import run

    monkeypatch.setattr("worldtune.infer.dynamics.inverse_dynamics",
                        lambda pipe, video, domain, task, **kw: np.zeros((len(video) - 1, domain.width), np.float32))
    out = run(_cfg(fd_trained, setup, tmp_path / "zero", "--trajectories.labeller", "cosmos3",
                   "--trajectories.cosmos3.compare_clips", "0"))
    stats = A.read_index(fd_trained["dataset"])["stats"]["action"]
    table = pq.read_table(next(Path(out["out"], "data").rglob("*.parquet")))
    acts = np.asarray(table.column("action").to_pylist(), np.float64)
    mid = (np.asarray(stats["q01"]) + np.asarray(stats["q99"])) / 2
    assert np.allclose(acts, mid[None], atol=1e-5)


def test_cosmos3_labeller_bad_inputs_are_one_line_errors(fd_trained, setup, tmp_path, tiny_model_dir):
    from worldtune.errors import ConfigError
    from worldtune.trajectories import run

    lonely = Path(shutil.copytree(setup["gen"], tmp_path / "gen"))
    info = json.loads((lonely / "info.json").read_text())
    (lonely / "info.json").write_text(json.dumps({**info, "dataset": None}))
    with pytest.raises(ConfigError, match="trajectories.cosmos3.dataset"):
        run(_cfg(fd_trained, {**setup, "gen": lonely}, tmp_path / "a", "--trajectories.labeller", "cosmos3"))
    with pytest.raises(ConfigError, match="has no"):
        run(_cfg(fd_trained, setup, tmp_path / "b", "--trajectories.labeller", "cosmos3", "--model.path",
                 str(tiny_model_dir)))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_untrained_rows_warning_is_true_for_the_seed_and_for_a_new_robot(fd_trained, tmp_path, capsys):
    """The seed-cosmos3 checkpoint trained its scene robot's slot both ways (its recipe's joint task), so labelling
    that robot warns of nothing; a robot the seed never saw, in a slot the seed never trained, still gets the warning,
    as does the scene robot on a random checkpoint (tiny-cosmos3: nothing trained anywhere)."""
    from worldtune.data.actions import read_index
    from worldtune.idm.cosmos3 import load_cosmos3_labeler

    def labeller(dataset: Path, *model: str):
        return load_cosmos3_labeler(load_config(None, [*model, "--trajectories.cosmos3.dataset", str(dataset),
                                                       "--trajectories.device", "cpu"]), None, 15.0)

    index = read_index(fd_trained["dataset"])
    assert index["domain"]["new"]  # the scene robot has no released Cosmos 3 domain: a new slot
    seed = labeller(fd_trained["dataset"], "--model.name", "seed-cosmos3")
    assert (seed.output_rows, seed.note) == ("checkpoint", None)
    assert "warning" not in capsys.readouterr().out

    other = Path(shutil.copytree(fd_trained["dataset"], tmp_path / "other", ignore=shutil.ignore_patterns("cache")))
    domain = {**index["domain"], "name": "another_gantry_4d", "id": index["domain"]["id"] - 1}
    (other / "actions.json").write_text(json.dumps({**index, "domain": domain}))
    unseen = labeller(other, "--model.name", "seed-cosmos3")
    assert unseen.note is not None and "another_gantry_4d" in unseen.note
    assert "warning: domain 'another_gantry_4d'" in capsys.readouterr().out
    random = labeller(fd_trained["dataset"], "--model.path", str(fd_trained["model"]))
    assert random.note is not None and index["domain"]["name"] in random.note
