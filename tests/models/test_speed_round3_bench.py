"""`benchmarks/speed_round3.py --tiny` runs every goal on the CPU and writes, per goal, the baseline and worldtune
seconds, their ratio, the noise floor and (generation, forward-dynamics chunk) the fast path's equality to the plain
one, which on the CPU's fp32 is exact."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_run_of_every_goal(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("speed_round3", ROOT / "benchmarks" / "speed_round3.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = bench.main(["--tiny", "--device", "cpu", "--json", str(tmp_path / "r.json")])
    finally:
        torch.set_num_threads(n)
        sys.path.remove(str(ROOT / "benchmarks"))
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(res, default=str))
    goals = res["goals"]
    assert set(goals) == set(bench.GOALS)
    for name, g in goals.items():
        assert g["baseline_s"] > 0 and g["worldtune_s"] > 0, name
        assert g["ratio"] == pytest.approx(g["baseline_s"] / g["worldtune_s"], rel=1e-2), name
        assert g["noise_floor"] is not None and g["target"] and g["torch"] == torch.__version__, name
    for name in ("gen", "fd_chunk"):
        equal = goals[name]["equality"]
        for e in equal if isinstance(equal, list) else [equal]:
            assert e["max_abs"] == 0.0, name  # fp32 on the CPU: the fast path's frames are the plain path's
    assert goals["fd_chunk"]["rows"][0]["equality_batched_vs_alone"]["max_abs"] <= 1 / 255
    assert goals["lora"]["planner_gib"] is not None
