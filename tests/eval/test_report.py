"""`worldtune report`: HTML + Markdown, checked by loading the page in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from worldtune.config import ReportConfig
from worldtune.errors import EvaluationError
from worldtune.eval.report import run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# Injected into a copy of the page: loads every video fully, then writes what loaded into the DOM.
CHECK_JS = """
<script>
(function(){
  var vids = Array.from(document.querySelectorAll('video')), pending = vids.length;
  function done(){
    var imgs = Array.from(document.images).map(function(i){return i.complete && i.naturalWidth > 0;});
    var v = vids.map(function(x){return {ready: x.readyState, error: x.error ? x.error.code : null, w: x.videoWidth};});
    var pre = document.createElement('pre'); pre.id = 'load-check';
    pre.textContent = JSON.stringify({images: imgs, videos: v});
    document.body.appendChild(pre);
  }
  if (!pending) { window.addEventListener('load', done); return; }
  vids.forEach(function(x){
    var fin = function(){ if (--pending === 0) done(); };
    x.addEventListener('loadeddata', fin, {once: true});
    x.addEventListener('error', fin, {once: true});
    x.preload = 'auto'; x.load();
  });
})();
</script>
"""


@pytest.fixture(scope="module")
def report(evaluated, tmp_path_factory):
    eval_dir, _ = evaluated
    root = tmp_path_factory.mktemp("report")
    run_a = root / "runs" / "lora"
    run_a.mkdir(parents=True)
    (run_a / "run.json").write_text(json.dumps({"name": "lora", "mode": "lora"}))
    (run_a / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / (1 + s), "lr": 1e-4}) + "\n"
                                                 for s in range(1, 30)) + '{"step": 30, "val_loss": 0.2}\n{"step": 3')
    run_b = root / "runs" / "empty"
    run_b.mkdir()
    cfg = ReportConfig(eval=str(eval_dir), out=str(root / "out"), runs=[str(run_a), str(run_b)], title="test report")
    return root / "out", run(cfg)


def test_report_files_and_content(report):
    out, written = report
    page = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert "The VLM judge was skipped" in page and "judge was skipped" in md
    assert "| base | 4 |" in md and "| real (reference) | 1 |" in md
    assert (out / "assets" / "loss.png").is_file() and (out / "assets" / "metric_sampson_temporal.png").is_file()
    assert "empty: no metrics.jsonl" in page
    # one example row per (input, seed): base, lora and the real clip side by side
    assert written["examples"] == 4
    # ep0 seeds 0 and 1: base, lora, real each; "bad" and "one": base only, and "bad" is unreadable
    assert page.count("<video") == 3 + 3 + 1
    srcs = re.findall(r"src='([^']+)'", page)
    assert all(not s.startswith(("http", "/")) for s in srcs)  # relative: works offline and when moved
    assert all((out / s).is_file() for s in srcs)
    assert "video unavailable" in page  # the corrupt video


def test_no_results_is_a_clear_error(tmp_path):
    with pytest.raises(EvaluationError, match="results.json not found"):
        run(ReportConfig(eval=str(tmp_path), out=str(tmp_path / "r")))


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium not installed")
def test_page_images_and_videos_load_in_headless_chromium(report, tmp_path):
    out, _ = report
    check = out / "check.html"
    check.write_text((out / "report.html").read_text().replace("</body>", CHECK_JS + "</body>"))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000",
           "--dump-dom", check.as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'<pre id="load-check">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    status = json.loads(m.group(1).replace("&quot;", '"'))
    # every plot on the page (2 Sampson + 6 pixel bars, 6 horizon curves, the loss curve) loaded
    assert len(status["images"]) == (out / "report.html").read_text().count("<img") == 15 and all(status["images"])
    assert len(status["videos"]) >= 6
    for v in status["videos"]:
        assert v["error"] is None and v["ready"] >= 2 and v["w"] > 0, status


def test_report_shows_differences_curves_posters_and_held_out_loss(report):
    out, written = report
    page = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert "Paired difference to the base model" in page and "lora − base" in md
    assert "class=best" in page  # the best model per metric is highlighted
    assert (out / "assets" / "curve_psnr.png").is_file()  # pixel metrics over the horizon
    posters = list((out / "assets" / "videos").glob("*.jpg"))
    assert posters and all(f"poster='{Path('assets/videos', p.name).as_posix()}'" in page for p in posters)
    assert "mode lora" in page  # the settings of the run that made the adapter


def test_every_model_has_its_own_colour_in_every_plot(tmp_path, monkeypatch):
    """Base, two adapters and a baseline: four colours, the same in the bar plot and the horizon plot."""
    from matplotlib.axes import Axes

    from worldtune.eval.report import plot_curve, plot_metric
    from worldtune.eval.report_format import REFERENCE_COLOUR, model_colours

    labels = ["base", "lora", "dora", "first_frame", "real"]
    seen: dict[str, list] = {"plot": [], "bar": []}
    real_plot, real_bar = Axes.plot, Axes.bar
    monkeypatch.setattr(Axes, "plot", lambda self, *a, **k: seen["plot"].append((k["label"], k["color"]))
                        or real_plot(self, *a, **k))
    monkeypatch.setattr(Axes, "bar", lambda self, x, h, **k: seen["bar"].extend(zip(x, k["color"]))
                        or real_bar(self, x, h, **k))
    stat = {"mean": 1.0, "std": 0.1, "n": 2}
    results = {"models": {m: {"psnr": stat, "reference": m == "real", "baseline": m == "first_frame"} for m in labels}}
    rows = [{"model": m, "baseline": m == "first_frame", "pixel_curves": {"psnr": [1.0, 2.0]}} for m in labels[:4]]
    colours = model_colours(labels)
    assert plot_metric(results, "psnr", tmp_path / "m.png", colours) and plot_curve(rows, "psnr", tmp_path / "c.png", colours)
    assert len({colours[m] for m in labels[:4]}) == 4 and colours["real"] == REFERENCE_COLOUR
    assert dict(seen["bar"]) == colours and dict(seen["plot"]) == {m: colours[m] for m in labels[:4]}


def test_a_sampson_column_empty_for_the_real_clips_too_says_why():
    """The demo's 64x112 views of two cameras ~70° apart give no cross-view matches, the real clips' own frames
    included: the report says that the footage, not the models, leaves the column empty, and what a model's few
    values there rest on; a column the real clips have a value in, or were never skipped in, gets no such note."""
    from worldtune.eval.report import unmeasured_notes

    empty = {"n": 0, "mean": None}
    results = {
        "metrics": ["sampson_temporal", "sampson_crossview", "psnr"],
        "models": {"base": {"sampson_temporal": {"n": 3, "mean": 0.2}, "sampson_crossview": empty},
                   "real": {"reference": True, "sampson_temporal": {"n": 3, "mean": 0.1}, "sampson_crossview": empty}},
        "sampson": {"real": {"crossview": {"pairs": 0, "pairs_skipped": 510,
                                           "skip_reasons": {"too_few_matches": 493, "no_reference": 17}},
                             "temporal": {"pairs": 40, "pairs_skipped": 2, "skip_reasons": {"static_camera": 2}}}},
    }
    notes = unmeasured_notes(results)
    assert len(notes) == 1 and notes[0].startswith("sampson_crossview:") and "too_few_matches, 493 of 510" in notes[0]
    # a model's row with a value while the real clips have none: the note says what that value rests on
    results["models"]["base"]["sampson_crossview"] = {"n": 1, "mean": 13.7}
    notes = unmeasured_notes(results)
    assert len(notes) == 1 and "the values of base rest on the few videos" in notes[0], notes
    results["models"]["real"]["sampson_crossview"] = {"n": 2, "mean": 1.2}  # the real clips scored: no note
    assert unmeasured_notes(results) == []


def test_the_dynamic_figure_carries_its_floor_and_scope_beside_every_value(tmp_path):
    """Every model's value of sampson_crossview_dynamic is shown with the real clips' own value (its floor on
    this footage), in the HTML table and the Markdown summary, with a note on what it can and cannot resolve;
    bimodal videos are flagged."""
    from worldtune.eval.report import DYNAMIC_NOTE, _metrics_table_html, _skips_html, markdown_summary

    stat = lambda m: {"n": 4, "mean": m, "std": 0.1, "median": m, "missing": 0}  # noqa: E731
    results = {"metrics": ["sampson_crossview_dynamic", "psnr"], "lower_is_better": ["sampson_crossview_dynamic"],
               "models": {"base": {"videos": 4, "sampson_crossview_dynamic": stat(2.68), "psnr": stat(20.0)},
                          "lora": {"videos": 4, "sampson_crossview_dynamic": stat(3.1), "psnr": stat(21.0)},
                          "real": {"reference": True, "videos": 4, "sampson_crossview_dynamic": stat(2.62), "psnr": stat(99.0)}},
               "sampson": {"base": {"crossview_dynamic": {"n": 4, "n_nan": 0, "pairs": 100, "pairs_skipped": 0,
                                                          "bimodal_videos": 2}}}}
    md = markdown_summary(results, [], {}, None, "t")
    page = _metrics_table_html(results) + _skips_html(results)
    for text in (md, page):
        assert "2.68 ± 0.10 (n=4) (floor 2.62 px)" in text and "3.10 ± 0.10 (n=4) (floor 2.62 px)" in text
        assert "99.00 ± 0.10 (n=4) (floor" not in text and "2.62 ± 0.10 (n=4) (floor" not in text  # not on psnr, not on real
        assert "2 of 4 videos have per-frame values in two groups" in text
    assert DYNAMIC_NOTE in md and "not resolved" in DYNAMIC_NOTE


def test_two_groups_of_per_frame_values_are_flagged():
    from worldtune.eval.sampson import SeriesScore, two_groups

    rng = np.random.default_rng(0)
    two = list(rng.normal(0.3, 0.03, 20)) + list(rng.normal(1.0, 0.1, 14))
    g = two_groups(two)
    assert g is not None and abs(g["low_px"] - 0.3) < 0.05 and abs(g["high_px"] - 1.0) < 0.1 and g["frames_high"] == 14
    assert two_groups(list(rng.normal(0.3, 0.05, 32))) is None
    assert two_groups([0.3] * 30 + [1.0] * 2) is None  # two odd frames are not a group
    s = SeriesScore("a|b", pair_means=two, pair_medians=two)
    assert s.summary()["bimodal"] == g


def test_the_report_says_why_a_pair_has_no_geometry_or_an_unchecked_one():
    from worldtune.eval.report import _skips_html, markdown_summary

    stat = {"n": 1, "mean": 0.2, "std": 0.0, "median": 0.2, "missing": 0}
    dropped = {"mode": "calibrated", "available": False, "reason": "calibration disagrees with the real clip: 60 of 81",
               "checks": {}}
    unverified = {"mode": "calibrated", "available": True, "reason": None,
                  "checks": {"unverified": "too few correct matches to check it: 1 of 67"}}
    results = {"metrics": ["sampson_crossview"], "models": {"base": {"videos": 1, "sampson_crossview": stat}},
               "rig": {"inputs": {"g/ep0": {"pairs": {"a|b": dropped, "a|c": unverified, "b|c": {"available": True, "checks": {}}}},
                                  "g/ep1": {"pairs": {"a|b": dropped}}}}}
    for text in (markdown_summary(results, [], {}, None, "t"), _skips_html(results)):
        assert "cross-view pair a|b, 2 inputs: no rig geometry (calibrated): calibration disagrees with the real clip" in text
        assert "cross-view pair a|c, 1 input: calibration kept, unverified: too few correct matches" in text
        assert "pair b|c" not in text


def test_the_dynamic_figure_carries_its_floor_and_scope_in_results_json_and_on_the_console(capsys):
    """results.json's value of sampson_crossview_dynamic for every generated model says its floor (the real
    clips' mean) and its scope; the console prints the floor beside the value and the scope under the table."""
    from worldtune.eval.scores import DYNAMIC_SCOPE, aggregate
    from worldtune.eval.summary import print_summary

    rows = [{"model": m, "name": f"in{i}", "seed": 0, "sampson_crossview_dynamic": v + 0.1 * i, "psnr": 20.0}
            for m, v in (("real", 2.6), ("base", 2.7), ("lora", 3.5)) for i in range(3)]
    models, _ = aggregate(rows, ["sampson_crossview_dynamic", "psnr"])
    for label in ("base", "lora"):
        v = models[label]["sampson_crossview_dynamic"]
        assert v["floor_px"] == pytest.approx(2.7) and v["scope"] == DYNAMIC_SCOPE
        assert "floor_px" not in models[label]["psnr"]
    assert "floor_px" not in models["real"]["sampson_crossview_dynamic"]
    print_summary({"out": "x", "metrics": ["sampson_crossview_dynamic", "psnr"], "models": models,
                   "judge": {"status": "skipped", "reason": "not asked"}})
    out = " ".join(capsys.readouterr().out.split())
    assert "2.8 (floor 2.70 px)" in out and "3.6 (floor 2.70 px)" in out and "2.7 (floor" not in out
    assert "only across the epipolar lines" in out and "not resolved" in out
