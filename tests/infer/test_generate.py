"""`worldtune generate` end to end on the tiny model: equivalence, determinism, resume, datasets, bad adapters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.infer.conftest import F, GRID, H, W, make_adapter, make_dataset, random_frames, write_image
from worldtune.config import WorldtuneConfig
from worldtune.data.video import read_frames, write_video
from worldtune.errors import GenerationError
from worldtune.infer.generate import run, to_uint8

SEQ = 160  # the tiny spec's 64 tokens end inside the chat template's system prompt: every prompt would look alike
PROMPT = "A robot arm picks up the red cube."
REQUIRED = {"model", "name", "seed", "prompt", "instruction", "video", "views", "ground_truth", "ground_truth_views",
            "fps", "num_frames", "height", "width", "steps", "guidance", "negative_prompt", "mode", "adapter",
            "adapter_scale", "base_fingerprint", "elapsed_s"}


def _cfg(model_dir: Path, inputs: Path, out: Path, **gen) -> WorldtuneConfig:
    base = dict(inputs=str(inputs), out=str(out), seeds=[5, 6], steps=3, guidance=7.0, height=H, width=W,
                num_frames=F, max_sequence_length=SEQ)
    return WorldtuneConfig.model_validate({"model": {"path": str(model_dir)}, "generate": {**base, **gen}})


def _rows(out: Path) -> dict[tuple, dict]:
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    return {(r["model"], r["name"], r["seed"]): r for r in rows}


@pytest.fixture(scope="module")
def folder_inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    write_image(d / "cube.png", random_frames(1, seed=3)[0])
    (d / "cube.txt").write_text(PROMPT)
    (d / "broken.png").write_bytes(b"\x89PNG truncated")
    (d / "broken.txt").write_text("A robot.")
    (d / "lonely.txt").write_text("A prompt without its image.")
    return d


@pytest.fixture(scope="module")
def first_run(tiny_model_dir, folder_inputs, adapter_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "out"
    run(_cfg(tiny_model_dir, folder_inputs, out, adapters=[{"path": str(adapter_dir), "name": "lora_a"}]))
    return out


def test_rows_and_files(first_run):
    everything = _rows(first_run)
    rows = {k: r for k, r in everything.items() if not r["baseline"]}
    # 2 models x 1 usable input x 2 seeds; the broken image is skipped, the lonely prompt never listed
    assert set(rows) == {(m, "cube", s) for m in ("base", "lora_a") for s in (5, 6)}
    # baselines: the held first frame needs no real clip, the VAE round trip does (folder inputs have none)
    assert set(everything) - set(rows) == {("first_frame", "cube", 5), ("first_frame", "cube", 6)}
    for r in rows.values():
        assert REQUIRED <= set(r)
        assert (first_run / r["video"]).is_file() and r["views"] == {} and r["ground_truth"] is None
        assert (r["steps"], r["height"], r["width"], r["num_frames"], r["fps"]) == (3, H, W, F, 16.0)
    assert rows[("lora_a", "cube", 5)]["adapter"].endswith("lora_a")
    info = json.loads((first_run / "info.json").read_text())
    assert info == {"format": "worldtune.generations", "version": 1, "layout": None, "fps": 16.0, "dataset": None}


def test_equals_direct_pipeline_with_lora(first_run, tiny_model_dir, adapter_dir, folder_inputs, tmp_path):
    """worldtune + exported adapter == Cosmos2_5_PredictBasePipeline + load_lora_weights, same seed and settings."""
    from diffusers import Cosmos2_5_PredictBasePipeline
    from PIL import Image

    from worldtune.models.build import NoOpSafetyChecker

    pipe = Cosmos2_5_PredictBasePipeline.from_pretrained(tiny_model_dir, safety_checker=NoOpSafetyChecker())
    pipe.set_progress_bar_config(disable=True)
    pipe.load_lora_weights(adapter_dir)
    direct = pipe(image=Image.open(folder_inputs / "cube.png").convert("RGB"), prompt=PROMPT, height=H, width=W,
                  num_frames=F, num_inference_steps=3, guidance_scale=7.0,
                  generator=torch.Generator().manual_seed(5), output_type="np", max_sequence_length=SEQ).frames[0]
    ref = read_frames(write_video(tmp_path / "direct.mp4", to_uint8(direct), fps=16)).astype(int)
    ours = read_frames(first_run / "lora_a/cube_s5.mp4").astype(int)
    base = read_frames(first_run / "base/cube_s5.mp4").astype(int)
    assert np.abs(ours - ref).max() <= 2  # same frames up to a rounding flip through the codec
    assert np.abs(base - ref).mean() > 5 * max(np.abs(ours - ref).mean(), 0.1)  # the adapter matters


def test_pipeline_sampler_with_pytorch_kernels_equals_the_plain_call_bit_for_bit(tiny_model_dir, tmp_path,
                                                                                 monkeypatch):
    """`sampler = "pipeline"` and `WORLDTUNE_CPU_CONV3D=pytorch`: the video file holds the plain call's frames exactly.
    This input and seed are ones where the default oneDNN kernels move 88 values by up to 5 levels after the codec."""
    from diffusers import Cosmos2_5_PredictBasePipeline
    from PIL import Image

    from worldtune.models.build import NoOpSafetyChecker

    monkeypatch.setenv("WORLDTUNE_CPU_CONV3D", "pytorch")
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_image(inputs / "cube.png", random_frames(1, seed=5)[0])
    (inputs / "cube.txt").write_text(PROMPT)
    run(_cfg(tiny_model_dir, inputs, tmp_path / "out", seeds=[5], sampler="pipeline"))
    pipe = Cosmos2_5_PredictBasePipeline.from_pretrained(tiny_model_dir, safety_checker=NoOpSafetyChecker())
    pipe.set_progress_bar_config(disable=True)
    direct = pipe(image=Image.open(inputs / "cube.png").convert("RGB"), prompt=PROMPT, height=H, width=W,
                  num_frames=F, num_inference_steps=3, guidance_scale=7.0,
                  generator=torch.Generator().manual_seed(5), output_type="np", max_sequence_length=SEQ).frames[0]
    ref = read_frames(write_video(tmp_path / "direct.mp4", to_uint8(direct), fps=16))
    np.testing.assert_array_equal(read_frames(tmp_path / "out/base/cube_s5.mp4"), ref)


def test_seeds_give_other_videos(first_run):
    a, b = (read_frames(first_run / f"base/cube_s{s}.mp4").astype(int) for s in (5, 6))
    assert np.abs(a - b).mean() > 1.0


def test_resume_skips_done_and_redoes_missing(first_run, tiny_model_dir, folder_inputs, adapter_dir):
    cfg = _cfg(tiny_model_dir, folder_inputs, first_run, adapters=[{"path": str(adapter_dir), "name": "lora_a"}])
    before = {p: p.stat().st_mtime_ns for p in first_run.rglob("*.mp4")}
    gone = first_run / "base/cube_s6.mp4"
    gone.unlink()
    run(cfg)
    after = {p: p.stat().st_mtime_ns for p in first_run.rglob("*.mp4")}
    redone = [p for p in after if after[p] != before.get(p)]
    assert redone == [gone]  # exactly the missing one, bit-identical settings otherwise untouched
    assert len(_rows(first_run)) == 6  # 4 generated + the first_frame baseline's 2 seeds


def test_same_seed_same_video_in_a_fresh_run(first_run, tiny_model_dir, folder_inputs, tmp_path):
    out = tmp_path / "again"
    run(_cfg(tiny_model_dir, folder_inputs, out, seeds=[5], batch_guidance=False))
    again = read_frames(out / "base/cube_s5.mp4")
    np.testing.assert_array_equal(again, read_frames(first_run / "base/cube_s5.mp4"))


def test_dataset_video2world_with_views_and_ground_truth(tiny_model_dir, tmp_path):
    ds = make_dataset(tmp_path / "ds", {"c0": "train", "c1": "val"}, num_frames=9)
    out = tmp_path / "out"
    run(_cfg(tiny_model_dir, ds, out, seeds=[0], steps=2, num_frames=9, mode="video2world", cond_latent_frames=2))
    rows = _rows(out)
    assert [k for k, r in rows.items() if not r["baseline"]] == [("base", "c1", 0)]  # held-out clips only
    r = rows[("base", "c1", 0)]
    assert r["instruction"] == "task 1" and r["prompt"] == "A robot does task 1." and r["num_frames"] == 9
    assert set(r["views"]) == set(r["ground_truth_views"]) == set(GRID["cells"])
    for rel in [r["video"], r["ground_truth"], *r["views"].values(), *r["ground_truth_views"].values()]:
        assert (out / rel).is_file(), rel
    wrist = read_frames(out / r["views"]["wrist"])
    assert wrist.shape == (9, H // 2, W // 2, 3)
    # the conditioning frames survive: the first generated frame is close to the clip's first frame
    first = read_frames(out / r["video"], indices=[0])[0].astype(int)
    truth = read_frames(ds / "clips/c1.mp4", indices=[0])[0].astype(int)
    assert np.abs(first - truth).mean() < np.abs(first - truth[::-1, ::-1]).mean()
    assert json.loads((out / "info.json").read_text())["layout"] == GRID


def test_bad_adapter_fails_before_any_video(tiny_model_dir, folder_inputs, tmp_path):
    import dataclasses

    from worldtune.models.build import build_transformer
    from worldtune.models.registry import get_spec

    spec = get_spec("tiny-predict2.5")
    deeper = dataclasses.replace(spec, transformer={**spec.transformer, "num_layers": 3})
    bad = make_adapter(build_transformer(deeper), tmp_path / "deeper")
    out = tmp_path / "out"
    with pytest.raises(GenerationError, match="does not exist in this base model"):
        run(_cfg(tiny_model_dir, folder_inputs, out, adapters=[{"path": str(bad)}]))
    assert not list(out.rglob("*.mp4"))


def test_fp8_regenerates_the_models_rows_and_records_it(first_run, tiny_model_dir, folder_inputs, adapter_dir,
                                                        tmp_path, float8_on_cpu):
    """generate.fp8 changes the frames, so it is part of each row's hash: turning it on regenerates the models' rows
    (not the baselines, which the transformer does not make) and records it; the frames stay near full precision's
    (torchao's float8 on the CPU: see the `float8_on_cpu` fixture)."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(first_run, out)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.mp4")}
    run(_cfg(tiny_model_dir, folder_inputs, out, adapters=[{"path": str(adapter_dir), "name": "lora_a"}], fp8=True))
    rows = _rows(out)
    redone = {p.relative_to(out).as_posix() for p in out.rglob("*.mp4") if p.stat().st_mtime_ns != before.get(p)}
    assert redone == {f"{m}/cube_s{s}.mp4" for m in ("base", "lora_a") for s in (5, 6)}
    assert all(r["fp8"] for r in rows.values() if not r["baseline"])
    low = read_frames(out / "base/cube_s5.mp4").astype(int)
    full = read_frames(first_run / "base/cube_s5.mp4").astype(int)
    assert 0 < np.abs(low - full).mean() < 3.0  # other frames, a few levels from bf16's


def test_fp8_on_the_cpu_is_refused_in_one_line_before_any_video(tiny_model_dir, folder_inputs, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(GenerationError, match=r"^generate.fp8: float8 needs a CUDA GPU .* turn generate.fp8 off$"):
        run(_cfg(tiny_model_dir, folder_inputs, out, fp8=True, baselines=[]))
    assert not list(out.rglob("*.mp4"))


def test_fuse_with_fp8_is_a_one_line_error():
    from worldtune.config import load_config
    from worldtune.errors import ConfigError

    with pytest.raises(ConfigError, match="turn one of them off"):
        load_config(None, ["--generate.fuse", "true", "--generate.fp8", "true"])
