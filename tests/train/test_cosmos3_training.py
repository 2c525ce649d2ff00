"""The trainer on tiny-cosmos3: cached latents and text-token ids, NVIDIA's objective, the guarantees."""

from pathlib import Path

import pytest
import torch

from tests.train.conftest import train_cfg
from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config
from worldtune.train.checkpoint import CheckpointManager
from worldtune.train.trainer import Trainer


@pytest.fixture(scope="module")
def cosmos3_dir(tiny_cosmos3_dir) -> Path:
    return tiny_cosmos3_dir


@pytest.fixture(scope="module")
def cosmos3_data(tmp_path_factory, cosmos3_dir) -> Path:
    from worldtune.data.cache import run as cache_run

    root = write_fake_dataset(tmp_path_factory.mktemp("data") / "ds", n_train=4, n_val=1)
    cache_run(load_config(None, ["--model.path", str(cosmos3_dir), "--cache.dataset", str(root),
                                 "--cache.dtype", "fp32"]))
    return root


def test_cache_holds_token_ids_keyed_by_fps(cosmos3_dir, cosmos3_data):
    from worldtune.data.cache import LatentCache, cache_settings
    from worldtune.data.dataset import read_dataset
    from worldtune.models.load import resolve_spec

    (cache_dir,) = (cosmos3_data / "cache").iterdir()
    cache = LatentCache(cache_dir)
    assert cache.info["text_kind"] == "tokens"
    ids = cache.text("")
    assert ids.dtype == torch.int64 and ids.shape[0] == 2  # the prompt and the dropped text
    latents = cache.latents(sorted(cache.clip_ids)[0])
    assert latents.shape[0] == 48  # the Wan2.2 VAE's channels
    info, _ = read_dataset(cosmos3_data)
    cfg = load_config(None, ["--model.path", str(cosmos3_dir)])
    spec = resolve_spec(None, str(cosmos3_dir))
    other_fps = cache_settings(cfg, {**info, "fps": 2 * info["fps"]}, spec, "tokens")["key"]
    assert cache_settings(cfg, info, spec, "tokens")["key"] == cache_dir.name != other_fps


def test_loss_falls_with_nvidias_objective(cosmos3_dir, cosmos3_data, tmp_path):
    # Measured (2-core CPU): held-out loss at fixed noise 1.329 -> 1.114 after 120 LoRA steps at lr 1e-2
    # (-16 %); the threshold keeps half of that margin. At lr 1e-9 it stays at 1.0000 of the start.
    cfg = train_cfg(cosmos3_dir, cosmos3_data, tmp_path / "run", "--train.steps", "120", "--train.lr", "1e-2",
                    "--train.warmup", "10", "--train.log_every", "20", "--train.checkpoint.every", "0")
    trainer = Trainer(cfg)
    assert trainer.objective.time_distribution == "waver" and trainer.objective.text_dropout == 0.1
    before = trainer.validate()["val_loss"]
    summary = trainer.fit()
    assert summary["val_loss"] < 0.92 * before, (before, summary["val_loss"])
    assert summary["val_videos"] == 1 and len(list((tmp_path / "run" / "val").glob("step-*/*.mp4"))) == 1


def test_resume_is_exact(cosmos3_dir, cosmos3_data, tmp_path):
    extra = ("--train.steps", "4", "--train.checkpoint.every", "2", "--train.val_every", "0")
    Trainer(train_cfg(cosmos3_dir, cosmos3_data, tmp_path / "a", *extra)).fit()
    part = Trainer(train_cfg(cosmos3_dir, cosmos3_data, tmp_path / "b", *extra))
    part.out.mkdir(parents=True)
    for _ in range(2):
        part.train_step()
    part.save()
    del part
    Trainer(train_cfg(cosmos3_dir, cosmos3_data, tmp_path / "b", *extra, "--train.resume", "auto")).fit()
    a = CheckpointManager.load(tmp_path / "a" / "checkpoints" / "step-00000004")["trainable"]
    b = CheckpointManager.load(tmp_path / "b" / "checkpoints" / "step-00000004")["trainable"]
    assert a.keys() == b.keys() and all("lora_" in k for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_full_finetune_trains_the_generator_only(cosmos3_dir, cosmos3_data, tmp_path):
    t = Trainer(train_cfg(cosmos3_dir, cosmos3_data, tmp_path / "f", "--train.mode", "full", "--train.steps", "1",
                          "--train.lr", "1e-2", "--train.ema", "0"))
    before = {n: p.detach().clone() for n, p in t.transformer.named_parameters()}
    t.train_step()
    changed = {n for n, p in t.transformer.named_parameters() if not torch.equal(p, before[n])}
    generator = set(t.family.generator_parameters(t.transformer))
    assert changed and changed <= generator
    assert any("add_q_proj" in n for n in changed) and not any(".to_q." in n for n in changed)
