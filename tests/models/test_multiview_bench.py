"""The multi-view benchmark runs on the CPU with --tiny and picks the token-matched view size."""

from __future__ import annotations

import json

from tests.benchmark_module import load_benchmark


def _bench():
    return load_benchmark("multiview_bench")


def test_matched_view_size():
    bench = _bench()
    assert bench.matched_view_size((432, 768), 3) == (256, 432)  # 3 x 24 x 16 x 27 = 31,104 = the grid's tokens
    assert bench.tokens(93, (432, 768)) == bench.tokens(93, (256, 432), views=3) == 31_104
    assert bench.matched_view_size((480, 832), 3) == (320, 416)  # 20 x 26 = 520 = 30 x 52 / 3, exactly


def test_tiny_run(tmp_path, one_thread):
    bench = _bench()
    res = bench.main(["--tiny", "--device", "cpu", "--steps", "1", "--warmup", "0", "--rank", "4",
                      "--json", str(tmp_path / "b.json")])
    assert json.loads((tmp_path / "b.json").read_text()) == res
    rows = {r["variant"]: r for r in res["results"]}
    assert set(rows) == {"grid", "multiview", "per_view"}
    assert rows["multiview"]["size"] == "48x48" and rows["multiview"]["views"] == 3
    assert abs(rows["multiview"]["tokens"] - rows["grid"]["tokens"]) / rows["grid"]["tokens"] < 0.05
    assert rows["per_view"]["tflop_per_step"] < rows["multiview"]["tflop_per_step"]  # no cross-view attention
    assert rows["multiview"]["trainable_params"] == rows["grid"]["trainable_params"] + 3 * 32  # + view embedding
    assert all(r["step_s"] > 0 and r["loss"] > 0 for r in rows.values())
