"""The forward- and inverse-dynamics training benchmark runs on the CPU with --tiny, at the shape it states."""

from __future__ import annotations

import json
import math

import pytest

from tests.benchmark_module import load_benchmark


@pytest.mark.parametrize("task", ["forward_dynamics", "inverse_dynamics"])
def test_tiny_run(tmp_path, task, one_thread):
    res = load_benchmark("cosmos3_fd_bench").main(["--tiny", "--device", "cpu", "--steps", "1", "--rank", "4",
                                                   "--task", task, "--json", str(tmp_path / "b.json")])
    assert json.loads((tmp_path / "b.json").read_text()) == res
    meta, (row,) = res["meta"], res["training"]
    assert (meta["canvas"], meta["latent"], meta["actions"]) == ([192, 320], [2, 2, 4], 4)
    assert meta["domain"]["width"] == 4 and meta["domain_row_params"] > 0 and meta["text_tokens"] > 100
    # the input projection's rows (16 x 32 weights + 32 biases: action_dim 16, hidden 32), and for inverse dynamics
    # the output projection's too (32 x 16 + 16)
    assert meta["task"] == task and meta["domain_row_params"] == (544 if task == "forward_dynamics" else 1072)
    assert row["variant"] == "eager" and row["s_per_step"] > 0 and all(math.isfinite(x) for x in row["losses"])


def test_several_clips_per_step(tmp_path, one_thread):
    """`--batch 1,2` times each variant at one and two clips per step: the second step does twice the work."""
    res = load_benchmark("cosmos3_fd_bench").main(["--tiny", "--device", "cpu", "--steps", "1", "--rank", "4",
                                                   "--batch", "1,2", "--json", str(tmp_path / "b.json")])
    one, two = res["training"]
    assert (one["batch"], two["batch"]) == (1, 2)
    assert two["step_flops"] == 2 * one["step_flops"]
    assert two["s_per_clip"] == pytest.approx(two["s_per_step"] / 2, abs=1e-4)
    assert all(math.isfinite(x) for x in one["losses"] + two["losses"])
