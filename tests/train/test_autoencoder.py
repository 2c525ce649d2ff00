"""`worldtune autoencoder`: a VAE trained from scratch learns, resumes exactly, and exports its latent statistics."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config
from worldtune.eval.pixels import psnr_from_mse
from worldtune.train.autoencoder import AutoencoderTrainer, chunk_psnr, lr_at


def _cfg(data: Path, out: Path, steps: int, lr: float = 3e-3, *extra: str):
    return load_config(None, [
        "--model.name", "tiny-predict2.5", "--autoencoder.dataset", str(data), "--autoencoder.out", str(out),
        "--autoencoder.steps", str(steps), "--autoencoder.batch_size", "2", "--autoencoder.frames", "5",
        "--autoencoder.lr", str(lr), "--autoencoder.warmup", "2", "--autoencoder.val_every", "0",
        "--autoencoder.log_every", "1", "--autoencoder.checkpoint_every", "3", "--autoencoder.val_clips", "1",
        "--autoencoder.stats_clips", "2", "--autoencoder.device", "cpu", *extra])


@pytest.fixture(scope="module")
def small_clips(tmp_path_factory) -> Path:
    return write_fake_dataset(tmp_path_factory.mktemp("ae") / "ds", n_train=3, n_val=1, frames=9, height=32, width=32)


def test_loss_falls_and_export_has_latent_statistics(small_clips, tmp_path, one_thread):
    summary = AutoencoderTrainer(_cfg(small_clips, tmp_path / "run", 12)).fit()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert sum(losses[-3:]) / 3 < 0.75 * losses[0], losses
    cfg = json.loads((Path(summary["vae"]) / "config.json").read_text())
    assert len(cfg["latents_mean"]) == 16 and all(s > 0 for s in cfg["latents_std"])
    assert cfg["latents_std"] != [1.0] * 16  # measured, not the neutral defaults
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "done"


def test_resume_is_exact(small_clips, tmp_path, one_thread):
    AutoencoderTrainer(_cfg(small_clips, tmp_path / "whole", 6)).fit()
    AutoencoderTrainer(_cfg(small_clips, tmp_path / "split", 3)).fit()  # stops at 3 with a checkpoint
    AutoencoderTrainer(_cfg(small_clips, tmp_path / "split", 6)).fit()  # resumes from step 3
    a = load_file(str(tmp_path / "whole" / "checkpoints" / "step-00000006" / "trainable.safetensors"))
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step-00000006" / "trainable.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_learning_rate_warms_up_then_decays_to_the_floor():
    cfg = _cfg(Path("x"), Path("y"), 100).autoencoder
    assert lr_at(0, cfg) < lr_at(1, cfg) <= cfg.lr
    assert lr_at(99, cfg) == pytest.approx(cfg.lr * cfg.lr_floor, rel=0.01)


def _vae_model(tmp_path: Path, small_clips: Path) -> Path:
    """A model folder whose VAE was trained (a few steps) and measured, as a seed model's is."""
    summary = AutoencoderTrainer(_cfg(small_clips, tmp_path / "first", 4)).fit()
    model = tmp_path / "model"
    model.mkdir()
    Path(summary["vae"]).rename(model / "vae")
    return model


@pytest.mark.parametrize("decoder_base_dim", [None, 12])
def test_decoder_only_keeps_every_latent_and_learns(small_clips, tmp_path, one_thread, decoder_base_dim):
    from diffusers import AutoencoderKLWan

    from worldtune.train.autoencoder import load_clips, to_pixels

    model = _vae_model(tmp_path, small_clips)
    extra = ["--autoencoder.decoder_base_dim", str(decoder_base_dim)] if decoder_base_dim else []
    summary = AutoencoderTrainer(_cfg(small_clips, tmp_path / "dec", 12, 3e-3, "--model.path", str(model),
                                      "--autoencoder.train_part", "decoder", *extra)).fit()
    before = AutoencoderKLWan.from_pretrained(model, subfolder="vae")
    after = AutoencoderKLWan.from_pretrained(summary["vae"])
    assert (after.config["decoder_base_dim"] or after.config["base_dim"]) == (decoder_base_dim or 8)
    assert after.config["latents_mean"] == before.config["latents_mean"]
    assert after.config["latents_std"] == before.config["latents_std"]
    x = to_pixels(load_clips(small_clips, "val")[0][None, :5])
    with torch.no_grad():
        torch.testing.assert_close(after.encode(x).latent_dist.mode(), before.encode(x).latent_dist.mode(),
                                   rtol=0, atol=0)
        # learned: the round trip of every training clip is closer after than before (a fixed set, not one
        # random batch's loss, so the check does not hang on which windows the first step drew)
        clips = to_pixels(torch.stack([c[:5] for c in load_clips(small_clips, "train")]))
        latents = before.encode(clips).latent_dist.mode()
        err_before = (before.decode(latents).sample - clips).pow(2).mean()
        err_after = (after.decode(latents).sample - clips).pow(2).mean()
    assert err_after < 0.9 * err_before, (float(err_after), float(err_before))


def test_chunk_psnr_pools_each_latent_frame_over_clips():
    """Frame 0 is its own latent frame, then every 4 frames one: each chunk's PSNR is of its pooled squared error."""
    errors = np.array([[1.0] + [4.0] * 4 + [16.0] * 4, [1.0] + [4.0] * 4 + [48.0] * 4])  # 2 clips of 9 frames
    assert chunk_psnr(errors, 4) == pytest.approx([psnr_from_mse(1.0), psnr_from_mse(4.0), psnr_from_mse(32.0)], abs=1e-3)
    assert len(chunk_psnr(np.ones((1, 17)), 4)) == 5


def test_windows_default_to_whole_clips_and_validation_reads_every_chunk(small_clips, tmp_path, one_thread, capsys):
    cfg = _cfg(small_clips, tmp_path / "whole", 2)
    cfg = cfg.model_copy(update={"autoencoder": cfg.autoencoder.model_copy(update={"frames": None, "val_every": 1})})
    trainer = AutoencoderTrainer(cfg)
    assert trainer.frames == trainer.clip_frames == 9
    summary = trainer.fit()
    rows = [json.loads(x) for x in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    chunks = [r["val_psnr_chunks"] for r in rows if "val_psnr_chunks" in r]
    assert len(chunks) == 2 and all(len(c) == 3 for c in chunks)  # 9 frames: the first, then two chunks of 4
    assert summary["val_psnr_last_chunk"] == chunks[-1][-1]
    trainer._warn_short_windows([28.0, 27.0, 21.0])  # whole clips: nothing to blame on the windows
    assert "warning" not in capsys.readouterr().out

    short = AutoencoderTrainer(_cfg(small_clips, tmp_path / "short", 2))  # windows of 5 frames
    short._warn_short_windows([28.0, 27.0, 26.0])  # within 3 dB: no warning
    assert "warning" not in capsys.readouterr().out
    short._warn_short_windows([28.0, 27.0, 21.0])
    assert "autoencoder.frames = 9" in capsys.readouterr().out
