"""Does each video do the task? The block found in the video's last frames against where the real clip puts it
(worldtune.eval.task_success), on clips the scene itself renders: the real ones, ones with the block where the truth
puts it, and ones with the block elsewhere at the end.

A judge that counts a block found anywhere as done, or that judges the first frame instead of the last, passes the
wrong-place clip or the first frame held and fails here (`test_broken_judges_fail_the_checks`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worldtune.eval import task_success as ts

SOURCE_HW = (96, 160)
GRID_HW = (128, 224)  # 2x2 grid of 64x112 views, the demo's clip size
EPISODES = 6
LENGTH = 18  # a 17-frame clip ends after the block is let go on the blue cube


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> dict:
    """A synthetic-scene dataset (green block stacked on blue) prepared into grid clips, its episodes and truth."""
    from worldtune.config import PrepareConfig
    from worldtune.data import prepare
    from worldtune.scene.episode import demo_episodes
    from worldtune.scene.writer import write_demo_dataset

    root = tmp_path_factory.mktemp("task")
    kw = dict(height=SOURCE_HW[0], width=SOURCE_HW[1], length=LENGTH, targets=("green",), place_on="blue")
    write_demo_dataset(root / "lerobot", episodes=EPISODES, workers=1, **kw)
    prepare.run(PrepareConfig(source=str(root / "lerobot"), out=str(root / "dataset"), height=GRID_HW[0],
                              width=GRID_HW[1], workers=1, val_fraction=0.5), quiet=True)
    truth = ts.TaskTruth.load(root / "dataset")
    assert not isinstance(truth, str), truth
    info = json.loads((root / "dataset" / "info.json").read_text())
    return {"root": root, "dataset": root / "dataset", "truth": truth, "layout": info["layout"],
            "clips": sorted(truth.cal.clips), "episodes": demo_episodes(EPISODES, 0, **kw)}


def _real(scene: dict, clip: str) -> dict[str, np.ndarray]:
    from worldtune.eval.sampson import split_views
    from worldtune.eval.video import read_video

    return split_views(read_video(scene["dataset"] / "clips" / f"{clip}.mp4")[0], scene["layout"])


def _rendered(scene: dict, clip: str, block_at) -> dict[str, np.ndarray]:
    """The clip's exterior views drawn by the scene, the arm on its true path and the green block at `block_at(k,
    true centre)` in clip frame k, fitted into the clip views as prepare fits them."""
    from worldtune.data.layout import resize_frames

    row = scene["truth"].cal.clips[clip]
    ep = scene["episodes"][int(row["episode_index"])]
    out = {}
    for role in ("exterior_1", "exterior_2"):
        frames = []
        for k in range(int(row["num_frames"])):
            i = int(row["start_frame"]) + k
            g, opening, _ = ep.gripper(i)
            frames.append(ep.render_state(role, g, opening, {"green": block_at(k, ep.block_position("green", i))}))
        h, w = scene["truth"].cal.cell_size(role)
        out[role] = resize_frames(np.stack(frames), h, w, "pad")
    return out


def _elsewhere(k: int, true: np.ndarray) -> np.ndarray:
    """The block's true path, but in the last frames resting on the table 12 cm off where the real clip puts it."""
    return true if k < 12 else np.array([true[0] + 0.12, true[1], 0.02])


class _Source:
    def __init__(self, views: dict[str, np.ndarray]) -> None:
        self.views = views

    def load(self) -> dict[str, np.ndarray]:
        return self.views


def _verdicts(scene: dict, s: ts.TaskSettings = ts.TaskSettings()) -> dict[str, list]:
    """Per kind of video, its verdicts over the clips."""
    out: dict[str, list] = {"real": [], "right": [], "elsewhere": [], "first_frame": [], "moved": []}
    for clip in scene["clips"]:
        real = _real(scene, clip)
        videos = {"right": _rendered(scene, clip, lambda k, p: p), "elsewhere": _rendered(scene, clip, _elsewhere),
                  "first_frame": {r: np.repeat(v[:1], len(v), 0) for r, v in real.items()}}
        rows = ts.judge_input(("real", _Source(real)), [(k, _Source(v)) for k, v in videos.items()],
                              scene["truth"].clip(clip), s)
        for kind, row in rows.items():
            out[kind].append(row[ts.METRIC])
        out["moved"].append(rows["real"].get("task_moved"))
    return out


def _check(v: dict[str, list]) -> None:
    n = len(v["real"])
    assert sum(v["real"]) == n  # the detector reads the real clips' views
    assert sum(v["right"]) == n
    assert all(v["moved"]) and not any(v["elsewhere"]) and not any(v["first_frame"])


def test_truth_is_the_block_path_the_scene_recorded(scene):
    for clip in scene["clips"]:
        row = scene["truth"].cal.clips[clip]
        ep = scene["episodes"][int(row["episode_index"])]
        t = scene["truth"].clip(clip)
        want = [ep.block_position("green", int(row["start_frame"]) + k) for k in range(int(row["num_frames"]))]
        assert t.target == "green" and np.allclose(t.path, want, atol=1e-4)
        assert set(t.cameras[0]) == {"exterior_1", "exterior_2"} and t.cameras[0]["exterior_1"].height == 64


def test_real_and_right_place_do_the_task_elsewhere_and_first_frame_do_not(scene):
    _check(_verdicts(scene))


@pytest.mark.parametrize("broken", ["found_is_done", "judges_the_first_frame"])
def test_broken_judges_fail_the_checks(scene, monkeypatch, broken):
    real_verdict = ts.verdict

    def judge(views, truth, k, s):
        if broken == "found_is_done":
            return {**real_verdict(views, truth, k, s), ts.METRIC: ts.locate(views, truth, k, s) is not None}
        return real_verdict(views, truth, 0, s)

    monkeypatch.setattr(ts, "verdict", judge)
    with pytest.raises(AssertionError):
        _check(_verdicts(scene))


def test_summary_counts_judged_inputs_with_a_wilson_interval():
    rows = [{"model": "a", "name": "in0", "seed": 0, ts.METRIC: True, "task_moved": True},
            {"model": "a", "name": "in1", "seed": 0, ts.METRIC: False, "task_moved": True},
            {"model": "a", "name": "in2", "seed": 0, ts.METRIC: True, "task_moved": False},
            {"model": "a", "name": "in3", "seed": 0, ts.METRIC: None}]
    s = ts.summary(rows, {"status": "ok"})["models"]["a"]
    assert (s["done"], s["n"], s["not_judged"]) == (2, 3, 1) and (s["moved"]["done"], s["moved"]["n"]) == (1, 2)
    assert s["ci_low"] == pytest.approx(0.2077, abs=1e-3) and s["ci_high"] == pytest.approx(0.9385, abs=1e-3)
    assert ts.summary(rows, {"status": "absent", "reason": "x"}) == {"status": "absent", "reason": "x"}


def test_summary_counts_each_input_once_whatever_its_seeds():
    """A second seed of some inputs (worldtune demo --seed-inputs) must not count them twice: k/n is over inputs, on
    each input's first seed (a baseline's rows of every seed are one video), and `videos` counts every seed."""
    rows = [{"model": "a", "name": f"in{i}", "seed": s, ts.METRIC: i < 2 and s == 1, "task_moved": True}
            for i in range(4) for s in ((0, 1) if i < 2 else (0,))]
    rows += [{"model": "real", "name": f"in{i}", "seed": None, ts.METRIC: True, "task_moved": True} for i in range(4)]
    m = ts.summary(rows, {"status": "ok"})["models"]
    assert (m["a"]["done"], m["a"]["n"]) == (0, 4) and m["a"]["videos"] == {"done": 2, "n": 6}
    assert (m["real"]["done"], m["real"]["n"]) == (4, 4)


def test_truth_is_absent_with_a_reason_for_other_datasets(tmp_path, scene):
    assert "no prepared dataset" in ts.TaskTruth.load(None)
    assert "cameras.json" in ts.TaskTruth.load(tmp_path)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    for f in ("cameras.json", "manifest.parquet"):
        (prepared / f).write_bytes((scene["dataset"] / f).read_bytes())
    (tmp_path / "other" / "meta").mkdir(parents=True)
    (tmp_path / "other" / "meta" / "info.json").write_text("{}")
    pinfo = json.loads((scene["dataset"] / "info.json").read_text())
    (prepared / "info.json").write_text(json.dumps({**pinfo, "source": {**pinfo["source"], "path": str(tmp_path / "other")}}))
    why = ts.TaskTruth.load(prepared)
    assert isinstance(why, str) and "meta/scene.json" in why


def test_evaluate_and_report_give_the_rate_per_model(scene, tmp_path):
    """Through `worldtune evaluate` and the report: the real clips and the right-place videos do the task on every
    input, the wrong-place ones on none; the figure is in results.json, videos.jsonl and the report."""
    from worldtune.config import EvaluateConfig, ReportConfig
    from worldtune.data.layout import layout_from_dict
    from worldtune.eval.evaluate import run
    from worldtune.eval.report import run as report
    from worldtune.data.video import VideoWriter

    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1, "layout": scene["layout"],
                                               "fps": 15, "dataset": str(scene["dataset"])}))
    rows = []
    lay = layout_from_dict(scene["layout"])
    for clip in scene["clips"]:  # the real clip as prepare wrote it; the scene's renderings packed and encoded alike
        (gen / "gt").mkdir(exist_ok=True)
        (gen / "gt" / f"{clip}.mp4").write_bytes((scene["dataset"] / "clips" / f"{clip}.mp4").read_bytes())
        wrist = _real(scene, clip)["wrist"]
        for model, views in (("right", _rendered(scene, clip, lambda k, p: p)),
                             ("elsewhere", _rendered(scene, clip, _elsewhere))):
            grid = lay.pack({**views, "wrist": wrist}, *GRID_HW)
            video = Path(model) / f"{clip}.mp4"  # one x264 thread: the same bytes every run (the verdicts are of
            with VideoWriter(gen / video, 15, crf=23, threads=1) as w:  # 64x112 views, where a codec's whim counts)
                for frame in grid:
                    w.write(frame)
            rows.append({"model": model, "name": clip, "seed": 0, "video": str(video), "views": {},
                         "ground_truth": f"gt/{clip}.mp4", "ground_truth_views": {}})
    (gen / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run(EvaluateConfig(runs=[str(gen)], out=str(tmp_path / "eval"), workers=1, metrics=["psnr"]))
    m = res["task_success"]["models"]
    n = len(scene["clips"])
    assert res["task_success"]["status"] == "ok"
    assert (m["real"]["done"], m["right"]["done"], m["elsewhere"]["done"]) == (n, n, 0) and m["right"]["n"] == n
    spread = res["input_vs_seed"]["models"]["right"]  # one seed per input: the reason, not a figure
    assert spread["ratio"] is None and "two noise seeds" in spread["reason"]
    videos = [json.loads(x) for x in (tmp_path / "eval" / "videos.jsonl").read_text().splitlines()]
    assert all(v["task_done"] is False for v in videos if v["model"] == "elsewhere")
    report(ReportConfig(eval=str(tmp_path / "eval"), out=str(tmp_path / "report"), runs=[], max_examples=1))
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Does it do the task?" in md and f"| right | {n}/{n} [" in md and f"| elsewhere | 0/{n} [" in md
    assert "## Across inputs vs across noise seeds" in md
