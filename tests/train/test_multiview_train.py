"""Multi-view training end to end on the CPU: demo LeRobot set -> separate-views clips -> per-view cache ->
60 LoRA steps of the 3-view tiny model, which must lower the held-out loss at fixed noise."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from worldtune.config import CacheConfig, ModelConfig, PrepareConfig, WorldtuneConfig
from worldtune.data.cache import LatentCache
from worldtune.data.dataset import read_dataset
from worldtune.data.cache import run as cache_views
from worldtune.data.multiview_cache import MultiViewCachedClips, dataset_roles, view_key
from worldtune.errors import DatasetError

ROLES = ["exterior_1", "exterior_2", "wrist"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def separate_dataset(tmp_path_factory):
    from worldtune.data.prepare import run as prepare
    from worldtune.scene.writer import write_demo_dataset

    root = tmp_path_factory.mktemp("mv")
    src = write_demo_dataset(root / "lerobot", episodes=6, height=32, width=48, workers=1)
    out = root / "dataset"  # one 9-frame clip per episode: 4 train, 2 val
    prepare(PrepareConfig(source=str(src), out=str(out), layout="separate", height=32, width=48, num_frames=9,
                          val_fraction=0.3, prompt_template="plain", workers=1, preset="ultrafast"), quiet=True)
    cfg = WorldtuneConfig(model=ModelConfig(name="tiny-predict2.5"),
                          cache=CacheConfig(dataset=str(out), device="cpu", dtype="fp32"))
    summary = cache_views(cfg)
    return out, summary


def test_cache_stores_every_view(separate_dataset):
    out, summary = separate_dataset
    info, rows = read_dataset(out)
    assert dataset_roles(info) == ROLES
    assert summary["failed"] == 0 and summary["encoded"] == len(rows) > 0
    cache = LatentCache(summary["cache"])
    assert cache.info["views"] == ROLES
    lat = cache.latents(view_key(rows[0]["clip_id"], "wrist"))
    assert tuple(lat.shape) == (16, 3, 4, 6)  # 9 frames -> 3 latent frames of 32x48 / 8
    clips = MultiViewCachedClips(rows, cache, ROLES, "train")
    item = clips[0]
    assert item["latents"].shape == (16, 9, 4, 6) and item["text"].ndim == 2
    torch.testing.assert_close(item["latents"][:, 6:], cache.latents(view_key(item["clip_id"], "wrist")))


def test_grid_dataset_is_refused(tmp_path):
    (tmp_path / "info.json").write_text(json.dumps({"layout": {"type": "grid"}}))
    with pytest.raises(DatasetError, match="separate"):
        dataset_roles(json.loads((tmp_path / "info.json").read_text()), tmp_path)


@pytest.fixture(scope="module")
def trained(separate_dataset, tmp_path_factory):
    """`worldtune train` on a separate-views dataset: 60 LoRA steps of the 3-view model (LoRA + view embedding)."""
    from worldtune.config import load_config
    from worldtune.train.trainer import Trainer

    out, _ = separate_dataset
    run = tmp_path_factory.mktemp("mvrun") / "run"
    cfg = load_config(None, ["--model.name", "tiny-predict2.5", "--train.dataset", str(out), "--train.out",
                             str(run), "--train.steps", "60", "--train.batch_size", "2",
                             "--train.lr", "3e-3", "--train.warmup", "5", "--train.lora.rank", "8",
                             "--train.checkpoint.every", "0", "--train.tensorboard", "false",
                             "--train.val_samples", "2", "--train.log_every", "10"])
    trainer = Trainer(cfg)
    before = trainer.validate()["val_loss"]
    summary = trainer.fit()
    return trainer, before, summary, run


def test_trainer_lowers_heldout_loss_of_the_multiview_model(trained):
    from worldtune.models.multiview import read_multiview_config

    trainer, before, summary, run = trained
    assert trainer.mv is not None and trainer.mv.num_views == len(ROLES)
    print(f"held-out loss {before:.4f} -> {summary['val_loss']:.4f}")
    # measured: 1.55 -> 1.13 with a hand-written loop of the same settings; require 10%
    assert summary["val_loss"] < 0.9 * before, (before, summary["val_loss"])
    assert trainer.mv.view_embed.abs().sum() > 0  # the view embedding trained too
    extras = read_multiview_config(run / "export")
    assert extras["num_views"] == 3 and (run / "export" / "multiview.safetensors").is_file()
    assert (run / "export" / "pytorch_lora_weights.safetensors").is_file()


def test_generate_and_evaluate_three_views(separate_dataset, trained, tmp_path):
    """`worldtune generate` on the separate-views dataset runs the multi-view model (base and the tuned
    adapter), writes one video per camera plus a side-by-side mosaic, and `worldtune evaluate` scores
    each camera over time and every pair of cameras."""
    from worldtune.config import load_config
    from worldtune.data.video import read_frames
    from worldtune.eval.evaluate import run as evaluate
    from worldtune.infer.generate import run as generate

    data, _ = separate_dataset
    run = trained[3]
    gen = tmp_path / "gen"
    cfg = load_config(None, ["--model.name", "tiny-predict2.5", "--generate.inputs", str(data), "--generate.out",
                             str(gen), "--generate.steps", "3", "--generate.seeds", "[0]",
                             "--generate.max_sequence_length", "160",
                             "--generate.adapters", json.dumps([{"path": str(run / "export"), "name": "mv"}]),
                             "--evaluate.runs", json.dumps([str(gen)]), "--evaluate.out", str(tmp_path / "eval"),
                             "--evaluate.workers", "1"])
    generate(cfg)
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()]
    baselines = [r for r in rows if r["baseline"]]
    rows = [r for r in rows if not r["baseline"]]
    assert {r["model"] for r in rows} == {"base", "mv"} and len(rows) == 2 * 2  # 2 held-out clips
    assert {r["model"] for r in baselines} == {"first_frame", "vae_round_trip"} and len(baselines) == 2 * 2
    for r in baselines:  # each camera on its own, side by side like the model's mosaic
        assert set(r["views"]) == set(ROLES) and read_frames(gen / r["video"]).shape == (9, 32, 3 * 48, 3)
    for r in rows:
        assert r["sampler"] == "multiview" and set(r["views"]) == set(r["ground_truth_views"]) == set(ROLES)
        views = {role: read_frames(gen / p) for role, p in r["views"].items()}
        assert all(v.shape == (9, 32, 48, 3) for v in views.values())
        assert read_frames(gen / r["video"]).shape == (9, 32, 3 * 48, 3)  # the mosaic
        assert (gen / r["ground_truth"]).is_file()
    base, tuned = ({role: read_frames(gen / p).astype(int) for role, p in r["views"].items()}
                   for r in sorted((r for r in rows if r["name"] == rows[0]["name"]), key=lambda r: r["model"]))
    assert np.abs(base["wrist"] - tuned["wrist"]).mean() > 1.0  # the adapter and view embedding act

    results = evaluate(cfg.evaluate)
    videos = [json.loads(x) for x in (tmp_path / "eval" / "videos.jsonl").read_text().splitlines()]
    scored = [v for v in videos if v["model"] == "mv"]
    assert len(scored) == 2
    for v in scored:  # every camera pair was attempted: evaluated pairs or skips counted by reason
        parts = v["sampson_detail"]["crossview"]["parts"]
        assert set(parts) == {"exterior_1|exterior_2", "exterior_1|wrist", "exterior_2|wrist"}
        assert v["sampson_crossview_pairs"] + v["sampson_crossview_skipped"] == 3 * 9  # 3 pairs x 9 frames
        assert set(v["sampson_detail"]["temporal"]["parts"]) == {"wrist"}  # only the moving camera has temporal geometry
        assert {f"temporal:{r}" for r in ROLES if r != "wrist"} <= set(v["sampson_detail"]["notes"])
    assert "mv" in results["models"]
