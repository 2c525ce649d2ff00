"""The world-model benchmark: its report from known outcomes (fast), and a reduced panel on seed-cosmos3 through
`worldtune serve` on the CPU (slow)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from worldtune.errors import ConfigError
from worldtune.serve.policy_benchmark import (REDUCED_PANEL, BenchmarkSettings, PolicyResult, _report, _write,
                                              prepare_dataset, run)


def _result(name: str, sim: list[int], model: list[int], truth_rate: float) -> PolicyResult:
    r = PolicyResult(name, len(sim), [bool(x) for x in sim], [bool(x) for x in model], 0, [bool(x) for x in sim])
    r.truth = [True] * int(100 * truth_rate) + [False] * (100 - int(100 * truth_rate))
    return r


def test_the_report_from_known_outcomes(tmp_path):
    """Three policies whose world-model verdicts are known: the rates, bias, order statistics and the
    prediction-powered estimate come out as worked by hand, and the three files are written."""
    settings = BenchmarkSettings(dataset="unused", out=str(tmp_path), episodes=6, paired=3, truth_episodes=100)
    results = [_result("good", [1, 1, 1, 1, 1, 0], [1, 1, 0, 1, 1, 1], 0.8),
               _result("mid", [1, 0, 1, 0, 1, 0], [1, 1, 1, 1, 1, 1], 0.5),  # an optimistic world model
               _result("bad", [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0], 0.0)]
    report = _report(settings, results, {"simulator": 1.0, "world_model": 2.0, "truth": 0.5, "model_load": 3.0})
    good, mid, bad = report["policies"]
    assert (good["simulator"]["rate"], good["world_model"]["rate"]) == (pytest.approx(5 / 6), pytest.approx(5 / 6))
    assert mid["bias"] == pytest.approx(0.5) and bad["bias"] == pytest.approx(1 / 6)
    # the world model puts mid (1.0) above good (5/6): a violation of |5/6 - 1/2| for both; bad agrees with both
    assert report["agreement"]["mmrv"] == pytest.approx(2 * (5 / 6 - 0.5) / 3)
    # mid's estimate: the model-only verdicts' mean (1.0) + the paired rectifier mean([0, -1, 0]) = 2/3
    assert mid["ppi"]["estimate"] == pytest.approx(2 / 3) and mid["ppi"]["model_rate"] == 1.0
    assert mid["ppi"]["covers_truth"] and report["ppi_covers_truth"] == 3 and report["chunks"] == 3 * 6 * 2
    _write(tmp_path, report)
    assert json.loads((tmp_path / "results.json").read_text())["format"] == "worldtune.policy_benchmark"
    assert (tmp_path / "scatter.png").stat().st_size > 1000
    md = (tmp_path / "report.md").read_text()
    assert "| mid | 0.50" in md and "MMRV 0.222" in md and "| 0/6 | +0.50 |" in md


@pytest.mark.parametrize("change, words", [({"horizon": 30}, "whole chunks"), ({"paired": 5}, "paired = 5"),
                                           ({"policies": ("oracle",)}, "no policy"),
                                           ({"remote": ("ws://127.0.0.1:8000",)}, "NAME=ws://host:port")])
def test_settings_that_cannot_give_figures_are_refused(change, words):
    settings = BenchmarkSettings(**{"dataset": "d", "out": "o", "episodes": 6, "paired": 3, **change})
    with pytest.raises(ConfigError, match=words):
        settings.check()


@pytest.mark.slow
def test_a_reduced_panel_on_seed_cosmos3_through_serve_on_the_cpu(tmp_path, one_thread):
    """The CPU's reduced run, as `benchmarks/world_model_policies_bench.py --reduced` runs it, within 15 minutes.
    The figures are the seed's (docs/benchmarks.md); the test holds what does not depend on the model: every
    policy rolled out in both envs, the simulator's rates spread, the judge's control on the simulator's frames."""
    t0 = time.perf_counter()
    dataset = prepare_dataset(tmp_path / "work")
    settings = BenchmarkSettings(dataset=str(dataset), out=str(tmp_path / "out"), policies=REDUCED_PANEL,
                                 episodes=6, paired=3, truth_episodes=100, steps=8, guidance=1.0, device="cpu")
    report = run(settings)
    seconds = time.perf_counter() - t0
    assert seconds <= 15 * 60
    rows = {r["policy"]: r for r in report["policies"]}
    assert set(rows) == set(REDUCED_PANEL) and report["chunks"] == 4 * 6 * 2
    assert rows["expert"]["truth"]["rate"] == 1.0 and rows["random"]["truth"]["rate"] == 0.0
    assert report["judge_control_agreement"] >= 0.9
    assert len(list((tmp_path / "out" / "episodes").glob("episode_*/judge.json"))) == 4 * 6
    assert np.isfinite(report["agreement"]["mmrv"]) and (tmp_path / "out" / "scatter.png").is_file()
