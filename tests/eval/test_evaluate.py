"""`worldtune evaluate` end to end on a tiny generation folder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from worldtune.config import EvaluateConfig
from worldtune.errors import EvaluationError
from worldtune.eval.evaluate import run


def test_results_structure_and_reference_row(evaluated):
    out, res = evaluated
    assert res["format"] == "worldtune.eval" and res["version"] == 1
    assert json.loads((out / "results.json").read_text())["models"].keys() == res["models"].keys()
    assert list(res["models"]) == ["base", "lora", "real"]
    assert res["models"]["real"]["reference"] and res["models"]["real"]["videos"] == 1
    assert res["models"]["base"]["videos"] == 4 and res["models"]["lora"]["videos"] == 2
    lora = res["models"]["lora"]["sampson_temporal"]
    assert lora["n"] == 2 and lora["mean"] is not None and lora["std"] is not None
    assert set(res["inputs"]["base"]) == {"ep0", "bad", "one"}
    assert res["inputs"]["base"]["ep0"]["sampson_crossview"]["n"] == 2


def test_metric_separates_wobbly_from_clean(evaluated):
    _, res = evaluated
    m = res["models"]
    for metric in ("sampson_temporal", "sampson_crossview"):
        assert m["lora"][metric]["mean"] < 1.0 and m["real"][metric]["mean"] < 1.0
        assert m["base"][metric]["mean"] > m["lora"][metric]["mean"] + 0.5, metric


def test_dynamic_crossview_figure_flows_beside_the_whole_frame_one(evaluated):
    """The figure on what moves flows like the whole-frame one (videos.jsonl columns, sampson_detail per
    pair, results.json statistics and skip counts). This rig's real clip proves its estimate of the fixed pair's F
    (0.23 px from the truth); its two fixed views stand still, so every frame is a counted `no_moving_pixels`
    skip and no value is made up; the wrist pairs, with no fixed F, are not scored and say so."""
    out, res = evaluated
    rows = [json.loads(line) for line in (out / "videos.jsonl").read_text().splitlines()]
    real = next(r for r in rows if r["model"] == "real")
    assert real["sampson_crossview_dynamic"] is None and real["sampson_crossview_dynamic_pairs"] == 0
    frames = real["sampson_detail"]["num_frames"]
    assert real["sampson_crossview_dynamic_skip_reasons"] == {"no_moving_pixels": frames}, real
    detail = real["sampson_detail"]
    assert list(detail["crossview_dynamic"]["parts"]) == ["exterior_1|exterior_2"]
    assert detail["crossview"]["parts"]["exterior_1|exterior_2"]["mode"] == "reference"
    assert all("moving camera" in detail["notes"][f"crossview_dynamic:{p}"] for p in ("exterior_1|wrist", "exterior_2|wrist"))
    assert res["models"]["real"]["sampson_crossview_dynamic"]["missing"] == 1
    assert "sampson_crossview_dynamic" in res["lower_is_better"]
    assert res["sampson"]["real"]["crossview_dynamic"]["skip_reasons"] == {"no_moving_pixels": frames}
    assert res["models"]["base"]["sampson_crossview_dynamic"]["floor_px"] is None  # no real clip value: no floor


def test_bad_videos_are_counted_skips(evaluated):
    out, res = evaluated
    rows = [json.loads(line) for line in (out / "videos.jsonl").read_text().splitlines()]
    assert len(rows) == 7  # 4 good generated + bad + one-frame + 1 reference; the torn line is dropped
    status = {r["name"]: r["status"] for r in rows if r["model"] == "base"}
    assert status["bad"].startswith("skipped: unreadable") and status["one"] == "skipped: fewer than 2 frames"
    assert res["sampson"]["base"]["videos_skipped"] == 2
    assert res["models"]["base"]["sampson_temporal"]["missing"] == 2
    with open(out / "videos.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 7 and "sampson_temporal" in table[0]


def test_judge_skipped_without_endpoint_says_so(evaluated):
    _, res = evaluated
    assert res["judge"]["status"] == "skipped" and "judge_endpoint" in res["judge"]["reason"]
    assert res["models"]["base"]["judge_physics"]["n"] == 0


def test_judge_with_endpoint(gen_folder, judge_server, tmp_path):
    cfg = EvaluateConfig(runs=[str(gen_folder)], out=str(tmp_path), workers=1, judge_endpoint=judge_server.url,
                         metrics=["judge_physics", "judge_instruction"], judge_fps=8, judge_concurrency=2)
    res = run(cfg)
    assert res["judge"]["status"] == "ran"
    assert res["models"]["lora"]["judge_instruction"]["mean"] == 5.0
    counts = res["judge"]["counts"]["judge_physics"]
    # 7 videos: the corrupt one fails; identical clips (lora, real) may be answered from the cache
    assert counts["ok"] + counts["cached"] == 6 and counts["error"] == 1
    assert (tmp_path / "judge_cache.jsonl").is_file()
    rows = [json.loads(line) for line in (tmp_path / "videos.jsonl").read_text().splitlines()]
    assert any(r.get("judge_physics_explanation") for r in rows)


def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(EvaluationError, match="info.json not found"):
        run(EvaluateConfig(runs=[str(tmp_path)], out=str(tmp_path / "o")))
    with pytest.raises(EvaluationError, match="unknown metric"):
        run(EvaluateConfig(runs=[str(tmp_path)], out=str(tmp_path / "o"), metrics=["fvd"]))


def test_cli_evaluate_and_report(gen_folder, tmp_path, capsys):
    from worldtune.cli import main

    code = main(["evaluate", "--evaluate.runs", json.dumps([str(gen_folder)]), "--evaluate.out", str(tmp_path / "e"),
                 "--evaluate.metrics", '["sampson_crossview"]', "--evaluate.workers", "1", "--evaluate.max_videos", "2"])
    assert code == 0 and (tmp_path / "e" / "results.json").is_file()
    assert main(["report", "--report.eval", str(tmp_path / "e"), "--report.out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.html").is_file()
    assert main(["report", "--report.eval", str(tmp_path / "nothing")]) == 1
    assert "results.json not found" in capsys.readouterr().err


def test_pixel_metrics_and_paired_difference_to_base(gen_folder, tmp_path):
    """lora's videos are the real clip (base wobbles): every pixel metric favours lora, pair by pair."""
    res = run(EvaluateConfig(runs=[str(gen_folder)], out=str(tmp_path / "eval"), workers=1,
                             metrics=["sampson_crossview", "pixels"]))
    m = res["models"]
    assert m["lora"]["psnr"]["mean"] > m["base"]["psnr"]["mean"] + 10
    d = m["lora"]["vs_base"]["psnr"]
    assert d["base"] == "base" and d["n_pairs"] == 2 and d["n_inputs"] == 1
    assert d["mean"] > 10 and d["win_rate"] == 1.0
    assert d["ci_low"] is None and "1 input in common" in d["reason"]  # one input: no interval, and it says why
    assert m["lora"]["vs_base"]["warp_error"]["mean"] < 0  # lower is better: lora warps more cleanly
    assert "psnr" in m["lora"]["best"] and "vs_base" not in m["base"]
    assert m["real"]["warp_error"]["mean"] is not None  # the real clip's own warping error, as reference
    rows = [json.loads(x) for x in (tmp_path / "eval" / "videos.jsonl").read_text().splitlines()]
    lora = next(r for r in rows if r["model"] == "lora")
    assert set(lora["pixel_detail"]) == {"exterior_1", "exterior_2", "wrist"}
    assert len(lora["pixel_curves"]["psnr"]) == 4  # frames 1..4 of a 5-frame clip
    # no dataset, so the fixed pair's reference comes from the real clip (or says why not)
    pair = res["rig"]["inputs"]["generations/ep0"]["pairs"]["exterior_1|exterior_2"]
    assert pair["mode"] == "reference" and (pair["available"] or pair["reason"])


def test_a_judge_that_is_down_fails_the_command_but_keeps_the_scores(gen_folder, tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    out = tmp_path / "eval"
    cfg = EvaluateConfig(runs=[str(gen_folder)], out=str(out), workers=1, judge_endpoint=f"http://127.0.0.1:{port}/v1",
                         judge_retries=0, judge_timeout=2, metrics=["sampson_crossview", "judge_physics"])
    with pytest.raises(EvaluationError, match="every judge request failed"):
        run(cfg)
    res = json.loads((out / "results.json").read_text())
    assert res["models"]["lora"]["sampson_crossview"]["mean"] is not None
    assert res["judge"]["status"] == "ran"


def test_a_baseline_is_scored_and_reported_like_a_model(tmp_path):
    """A first-frame baseline (rows of both seeds naming one file) beside base and lora: scored once per input, listed
    after the models, never the best, and below the real clip itself on dynamic PSNR."""
    from tests.eval.eval_scene import grid_frames, make_generation_folder
    from worldtune.config import ReportConfig
    from worldtune.eval.pixels import pixel_metrics
    from worldtune.eval.report import run as report
    from worldtune.eval.video import write_video
    from worldtune.infer.baselines import BASELINES, hold

    gen = make_generation_folder(tmp_path / "gen")
    real = grid_frames(5)
    write_video(gen / "first_frame" / "ep0.mp4", hold(real[:1], len(real)), 16)
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()[:-1]]  # the torn line
    rows += [{**rows[0], "model": "first_frame", "seed": s, "video": "first_frame/ep0.mp4", "baseline": True,
              "description": BASELINES["first_frame"]} for s in (0, 1)]
    (gen / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    res = run(EvaluateConfig(runs=[str(gen)], out=str(tmp_path / "eval"), workers=1, metrics=["sampson_crossview", "pixels"]))
    m = res["models"]
    assert list(m) == ["base", "lora", "first_frame", "real"]
    held = m["first_frame"]
    assert held["baseline"] and held["description"] == BASELINES["first_frame"] and not m["lora"]["baseline"]
    assert held["videos"] == 2 and held["dynamic_psnr"]["n"] == 2 and held["dynamic_psnr"]["std"] == 0.0  # one file
    # doing nothing scores below the real clip itself (lora's videos are the real clip) and below its self-score
    truth = pixel_metrics(real, real).values["dynamic_psnr"]
    assert held["dynamic_psnr"]["mean"] < m["lora"]["dynamic_psnr"]["mean"] - 10
    assert held["dynamic_psnr"]["mean"] < truth - 10
    # a frozen clip has the lowest warping error of all, yet the best model is the best generated one
    assert held["warp_error"]["mean"] < m["lora"]["warp_error"]["mean"] and "best" not in held
    assert "warp_error" in m["lora"]["best"]
    assert held["vs_base"]["dynamic_psnr"]["n_pairs"] == 2
    assert m["lora"]["vs_base"]["psnr"]["n_pairs"] == 2 and m["lora"]["vs_base"]["psnr"]["mean"] > 10  # as without it

    written = report(ReportConfig(eval=str(tmp_path / "eval"), out=str(tmp_path / "report")))
    page, md = (Path(written["html"]).read_text(), Path(written["markdown"]).read_text())
    name = "first frame repeated (no dynamics) — baseline first_frame"
    assert f"<tr class='baseline'><td>{name}</td>" in page and f"| {name} |" in md
    assert f"{name} − base" in page and "Baselines are not models" in md
    assert [v for v in written["videos"] if "first_frame" in v] == ["assets/videos/first_frame__ep0__s0.mp4"]  # once
