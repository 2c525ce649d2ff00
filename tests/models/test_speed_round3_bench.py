"""`benchmarks/speed_round3.py --tiny` runs every goal on the CPU and writes, per goal, the baseline and worldtune
seconds, their ratio, the noise floor and (generation, forward-dynamics chunk) the fast path's equality to the plain
one, which on the CPU's fp32 is exact."""

from __future__ import annotations

import json

import pytest
import torch

from tests.benchmark_module import load_benchmark


def test_tiny_run_of_every_goal(tmp_path, one_thread, float8_on_cpu):
    bench = load_benchmark("speed_round3")
    res = bench.main(["--tiny", "--device", "cpu", "--fp8", "--json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(res, default=str))
    goals = res["goals"]
    assert set(goals) == set(bench.GOALS)
    for name, g in goals.items():
        assert g["baseline_s"] > 0 and g["worldtune_s"] > 0, name
        b, w = g["baseline_s"], g["worldtune_s"]  # rounded to 1 ms; the ratio is taken before rounding
        assert g["ratio"] == pytest.approx(b / w, rel=0.0005 / b + 0.0005 / w + 1e-3), name
        assert g["noise_floor"] is not None and g["target"] and g["torch"] == torch.__version__, name
    for name in ("gen", "fd_chunk"):
        equal = goals[name]["equality"]
        for e in equal if isinstance(equal, list) else [equal]:
            assert e["max_abs"] == 0.0, name  # fp32 on the CPU: the fast path's frames are the plain path's
    assert goals["fd_chunk"]["rows"][0]["equality_batched_vs_alone"]["max_abs"] <= 1 / 255
    fp8 = [goals["fd_chunk"]["rows"][0]["fp8"], *goals["gen"]["fp8"]["vs_worldtune_bf16"]]
    assert goals["gen"]["fp8"]["layers"] > 0 and "failed" not in fp8[0]
    for e in (fp8[0]["vs_worldtune_bf16"], *fp8[1:]):  # the labelled option: other frames, near the plain ones
        assert 0 < e["mean_abs"] < 0.02
    assert goals["lora"]["planner_gib"] is not None
    assert all(r["planner_gib"] is not None for r in goals["fd_train"]["rows"] if "s_per_step" in r)


def test_a_failing_goal_leaves_the_others_measured(tmp_path, monkeypatch, one_thread):
    """On a rented GPU a goal that breaks must not cost the call's other goals: they run and are written, and the
    command still ends with an error naming the failed goal."""
    bench = load_benchmark("speed_round3")

    def broken(args, device):
        raise RuntimeError("No available kernel")

    monkeypatch.setitem(bench.RUNNERS, "gen", broken)
    path = tmp_path / "r.json"
    with pytest.raises(SystemExit, match="gen"):
        bench.main(["--tiny", "--device", "cpu", "--goals", "gen,predict25", "--json", str(path)])
    assert set(json.loads(path.read_text())["goals"]) == {"predict25"}
