"""`benchmarks/speed_round4.py --tiny` runs every goal on the CPU with its variants: float8 through torchao (with
torchao's hardware check lifted by the `float8_on_cpu` fixture) and an option applied through worldtune's own
set-up, each against the plain path and worldtune's bf16 path of the same run."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_module import load_benchmark

VARIANTS = ["--variant", "fp8=--generate.fp8 true --serve.fp8 true --train.fp8 true",
            "--variant", "math=--generate.attention_backend math"]


def test_tiny_run_of_every_goal_with_its_variants(tmp_path, one_thread, float8_on_cpu):
    bench = load_benchmark("speed_round4")
    res = bench.main(["--tiny", "--device", "cpu", *VARIANTS, "--json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(res, default=str))
    goals = res["goals"]
    assert set(goals) == set(bench.GOALS)
    for name, g in goals.items():
        assert g["baseline_s"] > 0 and g["worldtune_s"] > 0 and g["target"] and g["torchao"], name
        assert g["best"]["name"] in {"bf16", *g.get("variants", {})}, name
    gen, fd = goals["gen"]["variants"], goals["fd_chunk"]["variants"]
    assert set(gen) == {"fp8", "math"} and set(fd) == {"fp8"}  # math sets no serve option: not timed there
    for e in (*gen["fp8"]["vs_worldtune_bf16"], fd["fp8"]["vs_worldtune_bf16"]):
        assert 0 < e["mean_abs"] < 0.02  # the labelled option: other frames, near the bf16 ones
    assert not gen["fp8"]["same_as_bf16"] and not fd["fp8"]["same_as_bf16"]
    assert gen["math"]["same_as_bf16"]  # the CPU's SDPA already is the math kernel: the same frames
    for name in ("lora", "predict25"):
        assert set(goals[name]["variants"]) == {"fp8"}
        assert goals[name]["variants"]["fp8"]["worldtune_s"] > 0, goals[name]["variants"]
    assert 0 < goals["predict25"]["variants"]["fp8"]["numerics"]["grad_rel_diff_global"] < 0.15
    assert "variants" not in goals["fd_train"] or not goals["fd_train"]["variants"]


def test_variants_are_checked_before_any_goal_runs(tmp_path, capsys):
    bench = load_benchmark("speed_round4")
    for bad, why in (("fp8", "write NAME="), ("x=--generate.nope 1", "unknown key generate.nope"),
                     ("x=--train.lr 1e-3", "apply only train.fp8, not train.lr")):
        with pytest.raises(SystemExit):
            bench.main(["--tiny", "--device", "cpu", "--variant", bad, "--json", str(tmp_path / "r.json")])
        assert why in capsys.readouterr().err, bad
    assert not (tmp_path / "r.json").exists()
    assert bench.parse(["--variant", "none"]).variants == {}
