"""`worldtune autoencoder`: a model's Wan VAE trained from scratch as an autoencoder on prepared clips.

Why: a latent video model is made in two steps, the autoencoder first and the transformer on its latents
(the order NVIDIA's and Wan's VAEs were made in). worldtune's seed models start here: the same
`AutoencoderKLWan` class and config family as the real Cosmos VAEs, trained on the prepared clips of the
synthetic scene with an L1 + squared-error reconstruction loss and a small KL term, measured by the PSNR
of whole held-out clips through encode -> decode (the round trip every generated video goes through).

The run folder is like `worldtune train`'s: atomic checkpoints (`checkpoints/step-N`), exact resume
(data order and latent noise are drawn from (seed, step), the optimizer and weights come from the
checkpoint), SIGTERM/SIGUSR1 save and exit 42, `metrics.jsonl`, `run.json`. At the end the VAE is written
as a diffusers folder (`<out>/vae`) whose `latents_mean` / `latents_std` are measured on training clips, so
the normalised latents the transformer learns on have zero mean and unit variance per channel.
"""

from __future__ import annotations

import math
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import typer

from worldtune.atomic import append_jsonl, atomic_write_json, rewrite_jsonl
from worldtune.config import AutoencoderConfig, WorldtuneConfig
from worldtune.console import Progress, plain, setting_up, summary_table
from worldtune.data.dataset import read_clip_frames, read_dataset
from worldtune.errors import DatasetError
from worldtune.eval.pixels import psnr_from_mse
from worldtune.lock import OutputLock
from worldtune.models.cpu_conv3d import route_conv3d_to_onednn
from worldtune.train.checkpoint import CheckpointManager, DamagedCheckpointError, set_rng_state
from worldtune.train.preemption import PREEMPT_SIGNALS, REQUEUE_EXIT_CODE



def pick_device(setting: str) -> torch.device:
    """`auto`: the GPU when there is one."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def load_vae(cfg: WorldtuneConfig):
    """The VAE to train: the model folder's (to continue one), or the spec's, freshly initialised."""
    from diffusers import AutoencoderKLWan

    from worldtune.models.build import build_vae, seeded
    from worldtune.models.load import local_model_path, resolve_spec

    path = local_model_path(cfg.model.path, cfg.model.revision)
    if path is not None:
        return AutoencoderKLWan.from_pretrained(path, subfolder="vae", local_files_only=True)
    with seeded(cfg.model.seed):
        return build_vae(resolve_spec(cfg.model.name))


def with_decoder(vae, base_dim: int, seed: int):
    """`vae` with a new, randomly initialised decoder of width `base_dim` and its own encoder, quant convs and latent
    statistics: the latents (what a transformer learned on) stay exactly the same, the decode gets more capacity."""
    from diffusers import AutoencoderKLWan

    from worldtune.models.build import seeded

    if (vae.config.get("decoder_base_dim") or vae.config["base_dim"]) == base_dim:
        return vae
    with seeded(seed):
        wide = AutoencoderKLWan.from_config({**vae.config, "decoder_base_dim": base_dim})
    kept = {k: v for k, v in vae.state_dict().items() if not k.startswith("decoder.")}
    missing, unexpected = wide.load_state_dict(kept, strict=False)
    assert not unexpected and all(k.startswith("decoder.") for k in missing), (unexpected, missing[:3])
    return wide


def trainable_parameters(vae, part: str) -> list[torch.nn.Parameter]:
    """What learns: everything, or (part = decoder) the decoder and the convolution before it; the encoder side is
    frozen so that every latent stays what it was."""
    if part == "decoder":
        vae.encoder.requires_grad_(False)
        vae.quant_conv.requires_grad_(False)
    return [p for p in vae.parameters() if p.requires_grad]


def load_clips(root: str | Path, split: str, limit: int | None = None) -> list[torch.Tensor]:
    """uint8 [T, H, W, 3] frames of the dataset's clips of one split (a few hundred MB for thousands of small
    clips: held in memory so a step costs no decoding)."""
    _, rows = read_dataset(root)
    rows = [r for r in rows if r.get("split", "train") == split and r.get("video")]
    if limit is not None:
        rows = rows[:limit]
    return [torch.from_numpy(np.ascontiguousarray(read_clip_frames(root, r))) for r in rows]


def to_pixels(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [..., T, H, W, 3] -> float [..., 3, T, H, W] in [-1, 1], the VAE's input."""
    x = frames.float().div(127.5).sub(1.0)
    return x.movedim(-1, -4)


def windows(clips: list[torch.Tensor], frames: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    """A batch of random `frames`-long windows of random clips, as VAE input [B, 3, F, H, W]."""
    out = []
    for _ in range(batch):
        clip = clips[int(torch.randint(len(clips), (1,), generator=gen))]
        start = int(torch.randint(max(1, clip.shape[0] - frames + 1), (1,), generator=gen))
        out.append(clip[start:start + frames])
    return to_pixels(torch.stack(out))


@torch.no_grad()
def round_trip(vae, pixels: torch.Tensor) -> torch.Tensor:
    """decode(mode(encode(x))): what a video goes through between the pipeline's VAE calls."""
    return vae.decode(vae.encode(pixels).latent_dist.mode()).sample


@torch.no_grad()
def round_trip_errors(vae, clips: list[torch.Tensor], device: torch.device) -> np.ndarray:
    """[clips, frames] mean squared error (8-bit levels) of every frame of whole clips through the VAE."""
    rows = []
    for clip in clips:
        x = to_pixels(clip[None]).to(device)
        y = round_trip(vae, x).float().clamp(-1, 1)
        y8 = ((y + 1) * 127.5).round()
        rows.append((y8 - ((x + 1) * 127.5).round()).pow(2).mean(dim=(0, 1, 3, 4)).cpu().numpy())
    return np.stack(rows)


def chunk_psnr(errors: np.ndarray, temporal: int = 4) -> list[float]:
    """PSNR (dB) of each latent frame's pixels, pooled over clips: the first frame, then `temporal`-frame chunks.

    A causal video VAE decodes chunk k with the cache the chunks before it left; one trained on windows shorter than
    the clips it decodes has never learned the later caches, and its last chunks read several dB below its first
    (a seed VAE trained on 9-frame windows: 28.7 dB on the first frame, 21.4 on frames 13-16 of 17). This says so.
    """
    per_frame = errors.mean(axis=0)
    bounds = [0, 1, *range(1 + temporal, len(per_frame) + temporal, temporal)]
    return [round(float(psnr_from_mse(per_frame[a:b].mean())), 3) for a, b in zip(bounds, bounds[1:]) if a < len(per_frame)]


def round_trip_psnr(vae, clips: list[torch.Tensor], device: torch.device) -> dict[str, Any]:
    """Whole clips through the VAE, as `evaluate` measures frames: `val_psnr`, the mean PSNR (dB, 8-bit frames) over
    clips, and `val_psnr_chunks`, the PSNR of each latent frame (`chunk_psnr`)."""
    errors = round_trip_errors(vae, clips, device)
    return {"val_psnr": float(np.mean(psnr_from_mse(errors.mean(axis=1)))),
            "val_psnr_chunks": chunk_psnr(errors, vae.config.scale_factor_temporal)}


@torch.no_grad()
def latent_stats(vae, clips: list[torch.Tensor], device: torch.device) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of the latent means of `clips`: the VAE config's latents_mean / latents_std."""
    z = torch.cat([vae.encode(to_pixels(c[None]).to(device)).latent_dist.mode().float().movedim(1, 0).flatten(1)
                   for c in clips], dim=1)
    return z.mean(1).tolist(), z.std(1).clamp_min(1e-6).tolist()


def lr_at(step: int, ac: AutoencoderConfig) -> float:
    """Linear warmup, then cosine decay to lr x lr_floor at the last step."""
    if step < ac.warmup:
        return ac.lr * (step + 1) / ac.warmup
    progress = (step - ac.warmup) / max(1, ac.steps - ac.warmup)
    return ac.lr * (ac.lr_floor + (1 - ac.lr_floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class AutoencoderTrainer:
    """One autoencoder run: weights, AdamW, the run folder's checkpoints and logs."""

    def __init__(self, cfg: WorldtuneConfig):
        self.cfg, ac = cfg, cfg.autoencoder
        self.device = pick_device(ac.device)
        self.out = Path(ac.out)
        with setting_up("autoencoder", f"loading the clips of {ac.dataset}"):
            self.train_clips = load_clips(ac.dataset, "train")
            self.val_clips = load_clips(ac.dataset, "val", ac.val_clips) or self.train_clips[:ac.val_clips]
        if not self.train_clips:
            raise DatasetError(f"{ac.dataset} has no training clips in one packed video (grid or single layout): "
                               f"prepare it with prepare.layout = grid or single")
        self.clip_frames = int(self.train_clips[0].shape[0])
        self.frames = ac.frames or self.clip_frames
        if self.clip_frames < self.frames:
            raise DatasetError(f"{ac.dataset}: clips have {self.clip_frames} frames, fewer than "
                               f"autoencoder.frames = {ac.frames}: lower autoencoder.frames")
        with setting_up("autoencoder", "loading the VAE"):
            vae = load_vae(cfg)
            if ac.decoder_base_dim is not None:
                vae = with_decoder(vae, ac.decoder_base_dim, cfg.model.seed)
            self.vae = route_conv3d_to_onednn(vae.to(self.device).float().train())
        self.params = trainable_parameters(self.vae, ac.train_part)
        self.optimizer = torch.optim.AdamW(self.params, lr=ac.lr, weight_decay=0.0, betas=(0.9, 0.99))
        self.ckpt = CheckpointManager(self.out)
        self.step = 0
        self._stop: str | None = None
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
                         if self.device.type == "cuda" and ac.mixed_precision == "bf16" else torch.autocast("cpu", enabled=False))

    def train_step(self) -> dict[str, float]:
        ac = self.cfg.autoencoder
        t0 = time.time()
        gen = torch.Generator().manual_seed(ac.seed * 1_000_003 + self.step)
        x = windows(self.train_clips, self.frames, ac.batch_size, gen).to(self.device, non_blocking=True)
        noise_gen = torch.Generator(self.device).manual_seed(ac.seed * 1_000_003 + self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.step, ac)
        with self.autocast:
            with torch.set_grad_enabled(ac.train_part == "all"):
                dist = self.vae.encode(x).latent_dist
            y = self.vae.decode(dist.sample(generator=noise_gen)).sample.float()
        l1, mse = (y - x).abs().mean(), (y - x).pow(2).mean()
        kl = dist.kl().float().mean() / x[0].numel()
        loss = ac.l1_weight * l1 + ac.mse_weight * mse + ac.kl_weight * kl
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if ac.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, ac.grad_clip)
        self.optimizer.step()
        self.step += 1
        return {"step": self.step, "loss": loss.item(), "l1": l1.item(), "mse": mse.item(), "kl": kl.item(),
                "lr": self.optimizer.param_groups[0]["lr"], "step_time": time.time() - t0}

    def validate(self) -> dict[str, Any]:
        """The held-out clips' round trip (`round_trip_psnr`)."""
        self.vae.eval()
        try:
            with self.autocast:
                return round_trip_psnr(self.vae, self.val_clips, self.device)
        finally:
            self.vae.train()

    def save(self) -> Path:
        state = {"kind": "autoencoder", "config": self.cfg.autoencoder.model_dump(mode="json")}
        weights = {k: v.detach() for k, v in self.vae.state_dict().items()}
        return self.ckpt.save(self.step, weights, self.optimizer.state_dict(), state)

    def resume(self) -> Path | None:
        """Continue from the newest readable checkpoint (a damaged newest falls back to the one before)."""
        for source in self.ckpt.candidates(self.cfg.autoencoder.resume):
            try:
                ck = CheckpointManager.load(source)
                self.vae.load_state_dict({k: v.to(self.device) for k, v in ck["trainable"].items()})
                self.optimizer.load_state_dict(ck["optimizer"])
            except (DamagedCheckpointError, RuntimeError, ValueError, KeyError) as e:
                if self.cfg.autoencoder.resume != "auto":
                    raise
                plain(f"warning: {str(e).splitlines()[0]}; falling back to the previous complete checkpoint")
                continue
            set_rng_state(ck["rng"])
            self.step = int(ck["state"]["step"])
            self.ckpt.resumed_from = source
            return source
        return None

    def _on_signal(self, signum, _frame) -> None:
        self._stop = signal.Signals(signum).name

    def _log(self, row: dict[str, Any]) -> None:
        append_jsonl(self.out / "metrics.jsonl", row)

    def fit(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        with OutputLock(self.out, "autoencoder"):
            return self._fit()

    def _fit(self) -> dict[str, Any]:
        old = {s: signal.signal(s, self._on_signal) for s in PREEMPT_SIGNALS}
        try:
            source = self.resume()
            if (self.out / "metrics.jsonl").exists():  # rows logged after the checkpoint are redone
                rewrite_jsonl(self.out / "metrics.jsonl", lambda r: r.get("step", 0) <= self.step)
            if source is not None:
                plain(f"resumed from step {self.step} ({source})")
            atomic_write_json(self.out / "run.json", {"status": "running", "kind": "autoencoder",
                                                      "resumed_from": str(source) if source else None})
            return self._loop()
        finally:
            for s, h in old.items():
                signal.signal(s, h if self._stop is None else signal.SIG_IGN)

    def _loop(self) -> dict[str, Any]:
        ac = self.cfg.autoencoder
        t_start, psnr = time.time(), None
        with Progress("autoencoder", ac.steps, "steps", completed=self.step) as bar:
            while self.step < ac.steps:
                row = self.train_step()
                if ac.val_every and self.step % ac.val_every == 0 and self.step < ac.steps:
                    row.update(self.validate())
                    psnr = row["val_psnr"]
                if self.step % ac.log_every == 0 or "val_psnr" in row:
                    self._log(row)
                bar.info(f"loss {row['loss']:.4f} lr {row['lr']:.2e}"
                         + (f" held-out PSNR {psnr:.2f} dB" if psnr is not None else ""))
                bar.advance()
                if ac.checkpoint_every and self.step % ac.checkpoint_every == 0 and self.step < ac.steps:
                    self.save()
                if self._stop is not None:
                    self.save()
                    atomic_write_json(self.out / "run.json", {"status": "preempted", "kind": "autoencoder",
                                                              "signal": self._stop, "step": self.step})
                    raise typer.Exit(REQUEUE_EXIT_CODE)
        val = self.validate()
        self._log({"step": self.step, **val})
        final = self.save()
        folder = self.export()
        summary = {"run": str(self.out), "steps": self.step, "val_psnr": round(val["val_psnr"], 3),
                   "val_psnr_first_chunk": val["val_psnr_chunks"][0], "val_psnr_last_chunk": val["val_psnr_chunks"][-1],
                   "vae": str(folder), "checkpoint": str(final), "seconds": round(time.time() - t_start, 1),
                   "params": sum(p.numel() for p in self.vae.parameters())}
        self._warn_short_windows(val["val_psnr_chunks"])
        atomic_write_json(self.out / "run.json", {"status": "done", "kind": "autoencoder", "summary": summary})
        return summary

    def _warn_short_windows(self, chunks: list[float], gap_db: float = 3.0) -> None:
        """Say so when the held-out clips' last chunk decodes far below their first and the windows were the cause."""
        if self.frames < self.clip_frames and chunks[0] - chunks[-1] > gap_db:
            plain(f"warning: the held-out clips' last latent chunk decodes {chunks[0] - chunks[-1]:.1f} dB below their "
                  f"first ({chunks[-1]:.1f} vs {chunks[0]:.1f} dB): windows of {self.frames} frames never train the "
                  f"cache of later chunks; train on the whole clips with autoencoder.frames = {self.clip_frames}")

    def export(self) -> Path:
        """`<out>/vae`: the trained VAE with its latent statistics (measured, or kept where the encoder was frozen),
        written whole or not at all."""
        ac = self.cfg.autoencoder
        self.vae.eval()
        if ac.train_part == "all":
            g = torch.Generator().manual_seed(ac.seed)
            pick = torch.randperm(len(self.train_clips), generator=g)[:ac.stats_clips].tolist()
            mean, std = latent_stats(self.vae, [self.train_clips[i] for i in pick], self.device)
            self.vae.register_to_config(latents_mean=mean, latents_std=std)
        final, tmp = self.out / "vae", self.out / ".tmp-vae"
        shutil.rmtree(tmp, ignore_errors=True)
        self.vae.to("cpu").save_pretrained(tmp, safe_serialization=True)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        self.vae.to(self.device)
        return final


def run(cfg: WorldtuneConfig) -> dict[str, Any]:
    """Entry point of `worldtune autoencoder`."""
    summary = AutoencoderTrainer(cfg).fit()
    summary_table("worldtune autoencoder", summary)
    return summary
