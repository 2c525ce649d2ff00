"""The end-effector track figure: its truth, its detector (validated on real clips first) and its place in
`worldtune evaluate`.

The detector is held to what it is for: on the real clips its track must be close to the recorded one (a few
px at the clip size), and a wrong track (another episode's real clip; the first frame held on a moving clip) must
score many times worse. `test_validation_fails_for_broken_detectors` shows the same checks failing for a detector
that returns the frame centre and for one that never moves from the first frame's position.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from worldtune.eval import end_effector as ee

SOURCE_HW = (96, 160)  # small source frames keep the fixture fast; clips are 2x2 grids of 64x112 views
GRID_HW = (128, 224)
EPISODES = 6


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> dict:
    """A synthetic-scene LeRobot dataset prepared into 17-frame grid clips, and the truth read back."""
    from worldtune.config import PrepareConfig
    from worldtune.data import prepare
    from worldtune.scene.writer import write_demo_dataset

    root = tmp_path_factory.mktemp("ee")
    write_demo_dataset(root / "lerobot", episodes=EPISODES, height=SOURCE_HW[0], width=SOURCE_HW[1], length=24,
                       targets=("green",), motion="varied", place_on="blue", workers=1)
    prepare.run(PrepareConfig(source=str(root / "lerobot"), out=str(root / "dataset"), height=GRID_HW[0],
                              width=GRID_HW[1], workers=1, val_fraction=0.5), quiet=True)
    info = json.loads((root / "dataset" / "info.json").read_text())
    truth = ee.TrackTruth.load(root / "dataset")
    assert not isinstance(truth, str), truth
    return {"root": root, "dataset": root / "dataset", "layout": info["layout"], "truth": truth,
            "clips": sorted(truth.cal.clips)}


def _views(scene: dict, clip: str) -> dict[str, np.ndarray]:
    from worldtune.eval.sampson import split_views
    from worldtune.eval.video import read_video

    return split_views(read_video(scene["dataset"] / "clips" / f"{clip}.mp4")[0], scene["layout"])


def _blurred_and_shifted(frames: np.ndarray) -> np.ndarray:
    """What a VAE does to a clip, roughly: blur, a colour cast, a little noise."""
    rng = np.random.default_rng(0)
    gain, offset = np.array([1.1, 0.92, 1.05]), np.array([-8.0, 6.0, 4.0])
    out = [cv2.GaussianBlur(f.astype(np.float32), (0, 0), 1.2) * gain + offset + rng.normal(0, 2, f.shape) for f in frames]
    return np.clip(np.stack(out), 0, 255).astype(np.uint8)


def _figures(scene: dict) -> dict[str, list[float]]:
    """Per (clip, exterior view): the track error of the real clip, the real clip blurred and colour-shifted,
    another episode's real clip, and the first frame held; and the true track's own travel."""
    out: dict[str, list[float]] = {"real": [], "degraded": [], "other": [], "first_frame": []}
    clips = scene["clips"]
    for i, clip in enumerate(clips):
        views, other = _views(scene, clip), _views(scene, clips[(i + 1) % len(clips)])
        for role, truth in scene["truth"].views(clip).items():
            plate = ee.plate(views[role], truth)
            for kind, frames in (("real", views[role]), ("degraded", _blurred_and_shifted(views[role])),
                                 ("other", other[role]), ("first_frame", np.repeat(views[role][:1], len(views[role]), 0))):
                s = ee.score_view(frames, plate, truth)
                if s.error is not None:
                    out[kind].append(s.error)
    return out


def _check_detector(figures: dict[str, list[float]]) -> None:
    """What the detector must do on this scene (64x112 views): a few px on real clips, and wrong tracks far worse."""
    real, degraded = np.median(figures["real"]), np.median(figures["degraded"])
    other, held = np.median(figures["other"]), np.median(figures["first_frame"])
    assert len(figures["real"]) >= 2 * EPISODES - 2, figures
    assert real < 3.0, f"real clips: {real:.2f} px"
    assert degraded < 6.0, f"blurred, colour-shifted real clips: {degraded:.2f} px"
    assert other > 5 * real and other > 10.0, f"another episode's clip: {other:.2f} px vs real {real:.2f}"
    assert held > 5 * real and held > 10.0, f"first frame held: {held:.2f} px vs real {real:.2f}"


# ------------------------------------------------------------------------------------------------ truth
def test_truth_is_the_recorded_gripper_projected_into_the_clip_view(scene):
    """The truth read from the dataset (state rows, cameras.json, prepare's resize) is the scene's own projection."""
    from worldtune.data.layout import resize_transform
    from worldtune.scene.episode import demo_episodes

    eps = {e.index: e for e in demo_episodes(EPISODES, 0, SOURCE_HW[0], SOURCE_HW[1], length=24, targets=("green",),
                                             motion="varied", place_on="blue")}
    cell = (GRID_HW[0] // 2, GRID_HW[1] // 2)
    sx, sy, ox, oy = resize_transform(SOURCE_HW, cell, "pad")
    checked = 0
    for clip in scene["clips"]:
        row = scene["truth"].cal.clips[clip]
        ep = eps[int(row["episode_index"])]
        views = scene["truth"].views(clip)
        assert set(views) == {"exterior_1", "exterior_2"}  # the wrist rides on the gripper: no track there
        for role, truth in views.items():
            name = {"exterior_1": "exterior_1_left", "exterior_2": "exterior_2_left"}[role]
            for k in range(len(truth.points)):
                g, _, _ = ep.gripper(int(row["start_frame"]) + k * int(row["stride"]))
                u, v = ep.camera(name, 0).project(g[None])[0]
                assert np.allclose(truth.points[k], [sx * u + ox, sy * v + oy], atol=1e-3)
                checked += 1
    assert checked >= 2 * 17 * EPISODES


def test_truth_is_absent_with_a_reason_for_other_datasets(tmp_path, scene):
    assert "no prepared dataset" in ee.TrackTruth.load(None)
    assert "cameras.json" in ee.TrackTruth.load(tmp_path)
    info = json.loads((scene["root"] / "lerobot" / "meta" / "info.json").read_text())
    fake = tmp_path / "ds"
    (fake / "meta").mkdir(parents=True)
    (fake / "meta" / "info.json").write_text(json.dumps({**info, "robot_type": "franka"}))
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    for f in ("cameras.json", "manifest.parquet"):
        (prepared / f).write_bytes((scene["dataset"] / f).read_bytes())
    pinfo = json.loads((scene["dataset"] / "info.json").read_text())
    (prepared / "info.json").write_text(json.dumps({**pinfo, "source": {**pinfo["source"], "path": str(fake)}}))
    why = ee.TrackTruth.load(prepared)
    assert isinstance(why, str) and "not worldtune's synthetic scene" in why and "franka" in why


# -------------------------------------------------------------------------------------------- detector
def test_detector_follows_real_clips_and_rejects_wrong_tracks(scene):
    _check_detector(_figures(scene))


@pytest.mark.parametrize("broken", ["frame_centre", "first_frame_position"])
def test_validation_fails_for_broken_detectors(scene, monkeypatch, broken):
    """The checks above are not vacuous: a detector that answers the frame centre, or that never finds the
    gripper (the track then keeps the true first position), fails them."""
    if broken == "frame_centre":
        monkeypatch.setattr(ee, "detect", lambda frame, plate, s=None: np.array([(frame.shape[1] - 1) / 2,
                                                                                  (frame.shape[0] - 1) / 2]))
    else:
        monkeypatch.setattr(ee, "detect", lambda frame, plate, s=None: None)
    with pytest.raises(AssertionError):
        _check_detector(_figures(scene))


def test_plate_holds_no_arm(scene):
    """The plate is the scene without the arm: where the real arm is, a real frame differs from it."""
    clip = scene["clips"][0]
    views = _views(scene, clip)
    for role, truth in scene["truth"].views(clip).items():
        plate = ee.plate(views[role], truth)
        found = [ee.detect(f, plate) is not None for f, ok in zip(views[role], truth.inside(0.1)) if ok]
        assert found and np.mean(found) > 0.9


# ------------------------------------------------------------------------------------------- evaluate
def _generation_folder(scene: dict, out: Path) -> Path:
    """base = another episode's real clip (a wrong track); good = the real clip blurred and colour-shifted
    (close to the real track); first_frame = the first frame held (a baseline); and the real clips."""
    from worldtune.eval.video import read_video, write_video

    out.mkdir(parents=True)
    (out / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1,
                                               "layout": scene["layout"], "fps": 15, "dataset": str(scene["dataset"])}))
    clips, rows = scene["clips"], []
    for i, clip in enumerate(clips):
        real = read_video(scene["dataset"] / "clips" / f"{clip}.mp4")[0]
        other = read_video(scene["dataset"] / "clips" / f"{clips[(i + 1) % len(clips)]}.mp4")[0]
        gt = write_video(out / "ground_truth" / f"{clip}.mp4", real, 15).relative_to(out)
        for model, frames, baseline in (("base", other, False), ("good", _blurred_and_shifted(real), False),
                                        ("first_frame", np.repeat(real[:1], len(real), 0), True)):
            rel = write_video(out / model / f"{clip}_s0.mp4", frames, 15).relative_to(out)
            rows.append({"model": model, "name": clip, "seed": 0, "baseline": baseline, "video": str(rel), "views": {},
                         "ground_truth": str(gt), "ground_truth_views": {}, "fps": 15, "num_frames": len(frames)})
    (out / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.fixture(scope="module")
def scene_eval(scene, tmp_path_factory) -> tuple[Path, dict]:
    """`worldtune evaluate` of the folder above: (out folder, results)."""
    from worldtune.config import EvaluateConfig
    from worldtune.eval.evaluate import run

    tmp = tmp_path_factory.mktemp("ee_eval")
    gen = _generation_folder(scene, tmp / "gen")
    return tmp / "eval", run(EvaluateConfig(runs=[str(gen)], out=str(tmp / "eval"), workers=1,
                                            metrics=["ee_track_error"]))


def test_evaluate_writes_the_figure_per_model_view_and_paired_difference(scene, scene_eval):
    out, res = scene_eval
    assert res["metrics"] == ["ee_track_error"] and "ee_track_error" in res["lower_is_better"]
    m = res["models"]
    real, good, base, held = (m[k]["ee_track_error"]["mean"] for k in ("real", "good", "base", "first_frame"))
    assert m["real"]["ee_track_error"]["n"] == len(scene["clips"])
    assert real < 3.0 and good < 6.0 and base > 3 * good and held > 3 * good
    d = m["good"]["vs_base"]["ee_track_error"]
    assert d["mean"] < 0 and d["ci_high"] < 0 and d["n_inputs"] == len(scene["clips"])  # good beats base, CI < 0
    e = res["end_effector"]
    assert e["status"] == "ok" and set(e["models"]["good"]["views"]) == {"exterior_1", "exterior_2"}
    assert e["models"]["good"]["views_vs_base"]["exterior_1"]["mean"] < 0
    assert 0.8 <= e["models"]["real"]["found"] <= 1.0
    rows = [json.loads(x) for x in (out / "videos.jsonl").read_text().splitlines()]
    one = next(r for r in rows if r["model"] == "good")
    assert set(one["ee_tracks"]) == {"exterior_1", "exterior_2"} and len(one["ee_tracks"]["exterior_1"]) == 17
    assert "ee_track_error" in (out / "videos.csv").read_text().splitlines()[0]


def test_report_shows_the_figure_and_the_tracks(scene_eval, tmp_path):
    from worldtune.config import ReportConfig
    from worldtune.eval.report import run

    out, _ = scene_eval
    written = run(ReportConfig(eval=str(out), out=str(tmp_path / "report"), runs=[], max_examples=1))
    page = (tmp_path / "report" / "report.html").read_text()
    md = (tmp_path / "report" / "report.md").read_text()
    assert "End-effector track" in page and "ee_tracks.png" in page and "exterior_1" in page
    assert "## End-effector track" in md and "| good | exterior_2 |" in md
    assert any(p.endswith("ee_tracks.png") for p in written["plots"])


def test_evaluate_without_truth_states_why_and_goes_on(gen_folder, tmp_path):
    """A dataset that does not record the gripper's path: the figure is absent with the reason, not an error."""
    from worldtune.config import EvaluateConfig
    from worldtune.eval.evaluate import run

    res = run(EvaluateConfig(runs=[str(gen_folder)], out=str(tmp_path / "eval"), workers=1,
                             metrics=["psnr", "ee_track_error"]))
    assert res["metrics"] == ["psnr"]
    assert res["end_effector"]["status"] == "absent" and "no prepared dataset" in res["end_effector"]["reason"]
    assert res["models"]["base"]["psnr"]["n"] > 0


def test_detector_takes_the_arm_hanging_from_above_not_a_grey_blob(scene):
    """A washed-out block (what the seed models' videos show) is grey and differs from the plate too, but it is
    compact and does not reach the top of the view; the arm's column does. On the plate itself nothing is found."""
    clip = scene["clips"][0]
    views = _views(scene, clip)
    role, truth = next(iter(scene["truth"].views(clip).items()))
    plate = ee.plate(views[role], truth)
    frame = np.clip(plate.image, 0, 255).astype(np.uint8)
    assert ee.detect(frame, plate) is None
    blob = frame.copy()
    blob[40:47, 20:28] = (110, 112, 118)  # a grey square on the table
    assert ee.detect(blob, plate) is None
    arm = blob.copy()
    arm[0:36, 70:76] = (120, 122, 130)  # a grey column from the top edge down to row 35
    found = ee.detect(arm, plate)
    assert found is not None and abs(found[1] - 35) <= 1.5 and abs(found[0] - 72.5) <= 1.5


def test_separate_view_files_score_as_the_grid(scene, scene_eval, tmp_path):
    """Videos given as one file per camera (`views` in generations.jsonl) read the same figure as the grid."""
    from worldtune.config import EvaluateConfig
    from worldtune.eval.evaluate import run
    from worldtune.eval.video import write_video

    _, grid = scene_eval
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1, "layout": None,
                                               "fps": 15, "dataset": str(scene["dataset"])}))
    rows = []
    for clip in scene["clips"]:
        views = _views(scene, clip)
        real = {r: str(write_video(gen / "ground_truth" / clip / f"{r}.mp4", v, 15).relative_to(gen)) for r, v in views.items()}
        good = {r: str(write_video(gen / "good" / f"{clip}_s0" / f"{r}.mp4", _blurred_and_shifted(v), 15).relative_to(gen))
                for r, v in views.items()}
        rows.append({"model": "good", "name": clip, "seed": 0, "video": good["exterior_1"], "views": good,
                     "ground_truth": real["exterior_1"], "ground_truth_views": real})
    (gen / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run(EvaluateConfig(runs=[str(gen)], out=str(tmp_path / "eval"), workers=1, metrics=["ee_track_error"]))
    for label in ("good", "real"):
        assert res["models"][label]["ee_track_error"]["n"] == len(scene["clips"])
        assert abs(res["models"][label]["ee_track_error"]["mean"] - grid["models"][label]["ee_track_error"]["mean"]) < 1.0


def test_truth_follows_exterior_cameras_re_placed_per_episode(tmp_path):
    """A scene whose exterior cameras are re-placed every episode (`rig_jitter`) records each episode's cameras, so
    the truth is each episode's own projection, not the first episode's."""
    from worldtune.scene.episode import demo_episodes
    from worldtune.scene.writer import write_demo_dataset

    write_demo_dataset(tmp_path / "lerobot", episodes=3, height=48, width=80, length=8, rig_jitter=0.04, workers=1)
    cams = json.loads((tmp_path / "lerobot" / "meta" / "cameras.json").read_text())["cameras"]
    for ep in demo_episodes(3, 0, 48, 80, length=8, rig_jitter=0.04):
        for name in ("exterior_1_left", "exterior_2_left"):
            entry = cams[f"observation.images.{name}"]
            pose = entry["episodes"][str(ep.index)] if "episodes" in entry else entry
            assert np.allclose(pose["R"], ep.camera(name, 0).R) and np.allclose(pose["t"], ep.camera(name, 0).t)


def test_detector_learns_the_arm_colour_from_the_real_clip(tmp_path, monkeypatch):
    """An arm of another colour (yellow, close to the table's hue) is found from the colour of the real clip's arm;
    the scene's fixed grey rule finds it on almost no frame."""
    import worldtune.scene.episode as syn
    from worldtune.config import PrepareConfig
    from worldtune.scene.writer import write_demo_dataset
    from worldtune.data import prepare

    plain = syn._make_textures

    def yellow_arm(seed: int, size: int = 256, style: str = "demo", arm: str = "grey") -> dict:
        tex = plain(seed, size, style, arm)
        tex["arm"] = np.clip(tex["arm"].mean(axis=2, keepdims=True) / 0.6 * np.array([0.9, 0.75, 0.1]), 0, 1)
        return {k: np.ascontiguousarray(v, np.float32) for k, v in tex.items()}

    monkeypatch.setattr(syn, "_make_textures", yellow_arm)
    monkeypatch.setattr(syn, "_TEX_CACHE", {})  # the yellow arm stays in this test
    write_demo_dataset(tmp_path / "lerobot", episodes=4, height=SOURCE_HW[0], width=SOURCE_HW[1], length=24,
                       targets=("green",), motion="varied", place_on="blue", workers=1)
    prepare.run(PrepareConfig(source=str(tmp_path / "lerobot"), out=str(tmp_path / "dataset"), height=GRID_HW[0],
                              width=GRID_HW[1], workers=1), quiet=True)
    truth = ee.TrackTruth.load(tmp_path / "dataset")
    layout = json.loads((tmp_path / "dataset" / "info.json").read_text())["layout"]
    learned, grey = [], []
    for clip in sorted(truth.cal.clips):
        views = _views({"dataset": tmp_path / "dataset", "layout": layout}, clip)
        for role, t in truth.views(clip).items():
            plate = ee.plate(views[role], t)
            assert plate.arm_colour is not None and plate.arm_colour[2] < 0.2  # yellow: little blue
            learned.append(ee.score_view(views[role], plate, t).error)
            plate.arm_colour = None
            grey.append(ee.score_view(views[role], plate, t))
    assert np.median(learned) < 3.0, learned  # 2.0 measured
    found = sum(g.found for g in grey) / sum(g.frames for g in grey)
    assert found < 0.05 and np.median([g.error for g in grey]) > 10 * np.median(learned)  # 2 of 118 frames, 51 px
