"""The baselines `worldtune generate` writes beside the models' videos (`infer/baselines.py`): what they hold,
their rows, resume, and their scores through `worldtune evaluate` on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.infer.conftest import GRID, H, W, make_dataset, random_frames
from worldtune.config import EvaluateConfig, WorldtuneConfig
from worldtune.data.video import read_frames
from worldtune.errors import GenerationError
from worldtune.infer.baselines import BASELINES, hold, vae_round_trip
from worldtune.infer.generate import run

F = 5
SEEDS = [0, 1]


def _cfg(model_dir: Path, inputs: Path, out: Path, **gen) -> WorldtuneConfig:
    base = dict(inputs=str(inputs), out=str(out), seeds=SEEDS, steps=2, guidance=7.0, max_sequence_length=160)
    return WorldtuneConfig.model_validate({"model": {"path": str(model_dir)}, "generate": {**base, **gen}})


def _rows(out: Path) -> dict[tuple, dict]:
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    return {(r["model"], r["name"], r["seed"]): r for r in rows}


def _diffusers_round_trip(vae, frames: np.ndarray) -> np.ndarray:
    """decode(encode(frames)) written straight against diffusers' AutoencoderKLWan, no worldtune helper."""
    x = torch.from_numpy(frames).permute(3, 0, 1, 2)[None].float() / 127.5 - 1.0
    with torch.no_grad():
        y = vae.decode(vae.encode(x).latent_dist.mode()).sample[0].clamp(-1, 1)
    return ((y + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0).numpy()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("bl") / "ds", {"c0": "train", "c1": "val", "c2": "val"}, num_frames=F)


@pytest.fixture(scope="module")
def written(tiny_model_dir, dataset, tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """A generation folder with both baselines, and the frames handed to the video writer (before the codec)
    by path relative to the folder."""
    import worldtune.data.video as video

    out = tmp_path_factory.mktemp("bl_gen") / "out"
    frames: dict[str, np.ndarray] = {}
    real_write = video.write_video

    def recording(path, fr, fps, *args, **kwargs):
        fr = np.asarray(fr)
        frames[Path(path).relative_to(out).as_posix()] = fr.copy()
        return real_write(path, fr, fps, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(video, "write_video", recording)
        run(_cfg(tiny_model_dir, dataset, out))
    return out, frames


@pytest.fixture(scope="module")
def gen(written) -> Path:
    return written[0]


def test_hold_repeats_the_conditioning_frames():
    cond = random_frames(5, seed=7)
    np.testing.assert_array_equal(hold(cond[:1], 9), np.repeat(cond[:1], 9, axis=0))  # image2world
    held = hold(cond, 9)  # video2world with 5 conditioning frames: those, then the last one held
    np.testing.assert_array_equal(held[:5], cond)
    np.testing.assert_array_equal(held[5:], np.repeat(cond[4:5], 4, axis=0))


def test_rows_one_per_input_and_seed_sharing_one_file(gen):
    rows = _rows(gen)
    for label, words in BASELINES.items():
        mine = {k: r for k, r in rows.items() if k[0] == label}
        assert set(mine) == {(label, n, s) for n in ("c1", "c2") for s in SEEDS}  # held-out clips, every seed
        for (_, name, seed), r in mine.items():
            model = rows[("base", name, seed)]
            assert r["baseline"] is True and model["baseline"] is False and r["description"] == words
            assert r["video"] == f"{label}/{name}.mp4" and (gen / r["video"]).is_file()  # one file, every seed
            assert set(r["views"]) == set(GRID["cells"]) and all((gen / v).is_file() for v in r["views"].values())
            assert r["ground_truth"] == model["ground_truth"] and r["ground_truth_views"] == model["ground_truth_views"]
            for key in ("fps", "num_frames", "height", "width", "mode"):
                assert r[key] == model[key], key
            assert read_frames(gen / r["video"]).shape == read_frames(gen / model["video"]).shape
            assert read_frames(gen / r["views"]["wrist"]).shape == read_frames(gen / model["views"]["wrist"]).shape
    assert len({rows[("first_frame", "c1", s)]["params_hash"] for s in SEEDS}) == 1  # the seed changes nothing


def test_first_frame_is_the_first_frame_repeated(written, dataset):
    gen, frames = written
    first = read_frames(dataset / "clips/c1.mp4", indices=[0])
    np.testing.assert_array_equal(frames["first_frame/c1.mp4"], np.repeat(first, F, axis=0))  # exactly, before the codec
    real = read_frames(dataset / "clips/c1.mp4").astype(int)
    held = read_frames(gen / "first_frame/c1.mp4").astype(int)
    assert held.shape == real.shape
    for t in range(F):  # every frame is the clip's first frame (up to the codec), none is a later one
        err = np.abs(held[t] - real[0]).mean()
        assert err < 4.0, (t, err)  # a second H.264 encode of small, busy frames
        assert all(np.abs(held[t] - real[k]).mean() > 10 * max(err, 0.5) for k in range(1, F))


def test_vae_round_trip_equals_decode_of_encode_of_the_real_clip(written, dataset, tiny_pipe):
    _, frames = written
    for clip in ("c1", "c2"):
        real = read_frames(dataset / f"clips/{clip}.mp4")
        expected = _diffusers_round_trip(tiny_pipe.vae, real).astype(int)
        # the function and what generate wrote (before the codec): the same VAE's float arithmetic, within one level
        assert np.abs(vae_round_trip(tiny_pipe.vae, real).astype(int) - expected).max() <= 1
        ours = frames[f"vae_round_trip/{clip}.mp4"].astype(int)
        assert ours.shape == expected.shape and np.abs(ours - expected).max() <= 1, clip
        assert np.abs(ours - real.astype(int)).mean() > 10  # not the real clip: the tiny VAE loses the scene
        np.testing.assert_array_equal(frames[f"vae_round_trip/{clip}/wrist.mp4"], ours[:, H // 2:, : W // 2])


def test_vae_round_trip_through_the_cosmos3_vae(tiny_cosmos3_dir):
    """Cosmos 3's Wan2.2 VAE (48 channels, 16x, patchified) goes through the same helpers."""
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")
    frames = random_frames(F, 32, 48, seed=4)
    ours = vae_round_trip(pipe.vae, frames)
    assert ours.shape == frames.shape
    assert np.abs(ours.astype(int) - _diffusers_round_trip(pipe.vae, frames)).max() <= 1


def test_resume_does_not_remake_baselines(gen, tiny_model_dir, dataset, capsys):
    before = {p: p.stat().st_mtime_ns for p in gen.rglob("*.mp4")}
    rows_before = _rows(gen)
    run(_cfg(tiny_model_dir, dataset, gen))
    assert {p: p.stat().st_mtime_ns for p in gen.rglob("*.mp4")} == before  # nothing made again
    assert _rows(gen) == rows_before
    assert "0 rows to write, 8 already done" in capsys.readouterr().out.replace("\n", " ")
    gone = gen / "vae_round_trip/c2.mp4"
    gone.unlink()
    run(_cfg(tiny_model_dir, dataset, gen))
    after = {p: p.stat().st_mtime_ns for p in gen.rglob("*.mp4")}
    redone = sorted(p for p in after if after[p] != before.get(p))
    assert redone == sorted([gone, *(gen / "vae_round_trip/c2").glob("*.mp4")])  # that one, with its views
    assert {k: r["params_hash"] for k, r in _rows(gen).items()} == {k: r["params_hash"] for k, r in rows_before.items()}
    # another seed: the model makes new videos, the baselines only gain rows naming the files they have
    files = {p: p.stat().st_mtime_ns for p in gen.rglob("*.mp4") if p.parts[-2] in BASELINES or p.parts[-3] in BASELINES}
    run(_cfg(tiny_model_dir, dataset, gen, seeds=[*SEEDS, 9]))
    rows = _rows(gen)
    assert rows[("first_frame", "c1", 9)]["video"] == "first_frame/c1.mp4" and ("vae_round_trip", "c2", 9) in rows
    assert {p: p.stat().st_mtime_ns for p in files} == files


def test_without_a_real_clip_the_round_trip_is_skipped_with_a_note(tiny_model_dir, tmp_path, capsys):
    from tests.infer.conftest import write_image

    d = tmp_path / "in"
    d.mkdir()
    write_image(d / "cube.png", random_frames(1, seed=3)[0])
    (d / "cube.txt").write_text("A robot arm picks up the red cube.")
    out = tmp_path / "out"
    run(_cfg(tiny_model_dir, d, out, seeds=[0], height=H, width=W, num_frames=F, baselines=["vae_round_trip"]))
    assert {k[0] for k in _rows(out)} == {"base"}
    assert "note: no vae_round_trip baseline for 1 input(s): no real clip" in capsys.readouterr().out.replace("\n", " ")


def test_an_adapter_named_like_a_baseline_is_refused(tiny_model_dir, dataset, adapter_dir, tmp_path):
    with pytest.raises(GenerationError, match="'first_frame' is the label of a baseline"):
        run(_cfg(tiny_model_dir, dataset, tmp_path / "out", adapters=[{"path": str(adapter_dir), "name": "first_frame"}]))
    with pytest.raises(ValueError, match="twice"):
        _cfg(tiny_model_dir, dataset, tmp_path / "out", baselines=["first_frame", "first_frame"])


def test_evaluate_scores_the_baselines_like_models(gen, tmp_path):
    from worldtune.eval.evaluate import run as evaluate

    res = evaluate(EvaluateConfig(runs=[str(gen)], out=str(tmp_path / "eval"), workers=1, metrics=["pixels"]))
    m = res["models"]
    n = sum(k[0] == "base" for k in _rows(gen))  # 2 inputs x the seeds generated so far
    assert list(m) == ["base", "first_frame", "vae_round_trip", "real"]  # models, then baselines, then the reference
    for label, words in BASELINES.items():
        assert m[label]["baseline"] and m[label]["description"] == words and not m[label]["reference"]
        assert m[label]["videos"] == n and m[label]["inputs"] == 2
        for metric in ("psnr", "ssim", "dynamic_psnr", "motion_iou_spatial", "warp_error"):
            assert m[label][metric]["n"] == n and m[label][metric]["mean"] is not None, (label, metric)
        assert m[label]["vs_base"]["psnr"]["n_pairs"] == n  # paired with the base over (input, seed)
        assert label not in [k for k, v in m.items() if v.get("best")]
    assert not m["base"]["baseline"]
    # the held first frame has no motion at all: its motion masks never meet the real clip's
    assert m["first_frame"]["motion_iou_spatiotemporal"]["mean"] == 0.0
    rows = [json.loads(x) for x in (tmp_path / "eval" / "videos.jsonl").read_text().splitlines()]
    held = [r for r in rows if r["model"] == "first_frame" and r["name"] == "c1"]
    assert len(held) == n // 2 and len({r["psnr"] for r in held}) == 1 and all(r["baseline"] for r in held)
