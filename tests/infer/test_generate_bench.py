"""The generation benchmark runs end to end on the tiny spec (CPU smoke test) and agrees with itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generate_bench_tiny(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/generate_bench.py"), "--tiny", "--steps", "2",
                           "--device", "cpu", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    by = {r["variant"]: r for r in res["results"]}
    assert set(by) == {"pipeline", "batched", "fused"}  # the compiled variants are CUDA-only
    assert by["pipeline"]["dit_calls"] == 4 and by["batched"]["dit_calls"] == 2  # 2 steps, 2 branches vs 1 call
    assert by["batched"]["max_abs_diff_vs_first"] < 1e-4 and by["fused"]["max_abs_diff_vs_first"] < 1e-4  # same video
    assert res["meta"]["spec"] == "tiny-predict2.5"
