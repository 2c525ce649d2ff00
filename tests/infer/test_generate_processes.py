"""`worldtune generate` in several processes (torchrun on CPU) and on the Predict2 family (its pipeline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.infer.conftest import F, H, W, make_adapter, random_frames, write_image
from worldtune.config import WorldtuneConfig, dump_config
from worldtune.data.video import read_frames
from worldtune.infer.generate import run

SEQ = 160


def _cfg(model: dict, inputs: Path, out: Path, **gen) -> WorldtuneConfig:
    base = dict(inputs=str(inputs), out=str(out), seeds=[0, 1], steps=2, guidance=7.0, height=H, width=W,
                num_frames=F, max_sequence_length=SEQ)
    return WorldtuneConfig.model_validate({"model": model, "generate": {**base, **gen}})


@pytest.fixture(scope="module")
def five_inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("five")
    for i in range(5):
        write_image(d / f"in{i}.png", random_frames(1, seed=20 + i)[0])
        (d / f"in{i}.txt").write_text(f"A robot arm moves object {i}.")
    return d


@pytest.mark.slow  # ~15 s on 2 cores: two generate processes against one
def test_two_processes_split_the_work_and_merge(tiny_model_dir, five_inputs, tmp_path):
    """torchrun --nproc-per-node 2: every (input, seed) made exactly once, by the rank that owns its input."""
    out = tmp_path / "out"
    cfg_file = tmp_path / "gen.toml"
    cfg_file.write_text(dump_config(_cfg({"path": str(tiny_model_dir)}, five_inputs, out)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "worldtune.cli", "generate", str(cfg_file)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    for model in ("base", "first_frame"):  # the model's videos and the first-frame baseline's rows
        keys = [(r["name"], r["seed"]) for r in rows if r["model"] == model]
        assert sorted(keys) == sorted((f"in{i}", s) for i in range(5) for s in (0, 1))  # all, no duplicates
    by_rank = {k: [json.loads(x)["name"] for x in (out / f"generations.rank{k}.jsonl").read_text().splitlines()]
               for k in (0, 1)}
    assert by_rank[0] and by_rank[1] and not set(by_rank[0]) & set(by_rank[1])  # both worked, disjoint inputs
    # the same video as one process makes: the noise of a seed does not depend on the rank
    single = tmp_path / "single"
    run(_cfg({"path": str(tiny_model_dir)}, five_inputs, single, seeds=[1], max_inputs=2))
    for name in ("in0", "in1"):
        np.testing.assert_array_equal(read_frames(single / f"base/{name}_s1.mp4"), read_frames(out / f"base/{name}_s1.mp4"))


@pytest.fixture(scope="module")
def predict2_dir(tmp_path_factory) -> Path:
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-predict2", tmp_path_factory.mktemp("p2") / "model")


def test_predict2_generates_with_its_pipeline_and_an_adapter(predict2_dir, five_inputs, tmp_path):
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(predict2_dir), dtype="fp32")
    adapter = make_adapter(pipe.transformer, tmp_path / "p2_lora")
    out = tmp_path / "out"
    run(_cfg({"path": str(predict2_dir)}, five_inputs, out, seeds=[3], max_inputs=1,
             adapters=[{"path": str(adapter), "name": "lora"}]))
    rows = {r["model"]: r for r in map(json.loads, (out / "generations.jsonl").read_text().splitlines())
            if not r["baseline"]}
    assert set(rows) == {"base", "lora"}
    assert all(r["sampler"] == "pipeline" and r["fused_adaln"] is False for r in rows.values())
    base, lora = (read_frames(out / rows[m]["video"]).astype(int) for m in ("base", "lora"))
    assert base.shape == (F, H, W, 3)
    assert np.abs(base - lora).mean() > 1.0  # the adapter changes the video


def test_predict2_refuses_text2world(predict2_dir, five_inputs, tmp_path):
    from worldtune.errors import GenerationError

    with pytest.raises(GenerationError, match="no text2world"):
        run(_cfg({"path": str(predict2_dir)}, five_inputs, tmp_path / "out", mode="text2world"))
