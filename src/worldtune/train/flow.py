"""The rectified-flow training objective of Cosmos Predict 2.5 (as in NVIDIA's cosmos-predict2.5 code and diffusers' Cosmos training example; docs/training.md).

x0 are clean normalised latents [B, C, T, H, W]. Per sample: t ~ logit-normal, shifted to
sigma = s·t / (1 + (s−1)·t); x_t = sigma·n + (1 − sigma)·x0; the target velocity is n − x0.
The first k ∈ {0, 1, 2} latent frames stay clean (the conditioning frames of Image/Video2World),
are flagged in the condition mask, get timestep ≈ 1e-4 and are left out of the loss. Text is
dropped (zeroed) with some probability so that classifier-free guidance works at inference.

The same velocity objective trains Predict2: its pipeline's EDM preconditioning
(c_in = 1 − t, c_skip = 1 − t, c_out = −t with t = σ/(1 + σ)) makes the network output exactly
the rectified-flow velocity at x_t = (1 − t)·x0 + t·n, so only the fps input differs.

Every random draw of a sample comes from a generator seeded by (seed, step, global sample index),
on the CPU. A sample therefore gets the same noise whatever the device, the number of processes
or the batch it lands in — which is what makes multi-process runs equal single-process ones and
resumed runs equal uninterrupted ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FlowBatch:
    """Everything one transformer call and its loss need, for a batch."""

    x_t: torch.Tensor  # [B, C, T, H, W] noisy latents with clean conditioning frames
    target: torch.Tensor  # [B, C, T, H, W] velocity n − x0
    timestep: torch.Tensor  # [B, 1, T, 1, 1] sigma per frame, cond_timestep on conditioning frames
    condition_mask: torch.Tensor  # [B, 1, T, H, W] 1 on conditioning frames
    loss_mask: torch.Tensor  # [B, 1, T, 1, 1] 1 on frames that count in the loss
    text_keep: torch.Tensor  # [B] 1 keeps the text, 0 drops it
    sigma: torch.Tensor  # [B]
    num_cond: torch.Tensor  # [B] conditioning latent frames


def sample_seed(seed: int, step: int, index: int) -> int:
    """A distinct 63-bit seed per (run seed, step, global sample index)."""
    return (seed * 1_000_003 + step * 9_176_741 + index * 104_729 + 0x9E3779B1) % (2**63 - 1)


WAVER_MODE_S = 1.29  # the "waver" time density's mode parameter (NVIDIA's Cosmos 3 video recipe)


@dataclass(frozen=True)
class FlowMatchingLoss:
    logit_mean: float = 0.0
    logit_std: float = 1.0
    shift: float = 5.0
    cond_frames_probs: tuple[tuple[int, float], ...] = ((0, 0.5), (1, 0.25), (2, 0.25))
    cond_timestep: float = 1e-4
    text_dropout: float = 0.2
    time_distribution: str = "logitnormal"  # or "waver": t = 1 − u − s·(cos²(πu/2) − 1 + u), u ~ U(0, 1)

    def shift_sigma(self, t: torch.Tensor) -> torch.Tensor:
        return self.shift * t / (1 + (self.shift - 1) * t)

    def _time(self, gen: torch.Generator) -> torch.Tensor:
        """Unshifted t in [0, 1]: logit-normal (Cosmos 2.5), or the "waver" density Cosmos 3 video training uses
        (peaked at t = 0.5 like the logit-normal, with a flat, non-vanishing density at both ends)."""
        if self.time_distribution == "waver":
            u = torch.rand((), generator=gen)
            return 1 - u - WAVER_MODE_S * (torch.cos(torch.pi / 2 * u) ** 2 - 1 + u)
        return torch.sigmoid(torch.randn((), generator=gen) * self.logit_std + self.logit_mean)

    def _draw(self, gen: torch.Generator, shape: tuple[int, ...]) -> tuple[torch.Tensor, float, int, bool]:
        noise = torch.randn(shape, generator=gen)
        sigma = float(self.shift_sigma(self._time(gen)))
        ks, ps = zip(*self.cond_frames_probs)
        k = ks[int(torch.multinomial(torch.tensor(ps, dtype=torch.float64), 1, generator=gen))]
        keep = bool(torch.rand((), generator=gen) >= self.text_dropout)
        return noise, sigma, k, keep

    def prepare(self, x0: torch.Tensor, seeds: list[int], sigma: list[float] | None = None,
                num_cond: list[int] | None = None) -> FlowBatch:
        """Noise a batch. `seeds` give each sample its draws; `sigma`/`num_cond` force values (validation; an
        action run's clean frames, which may be all of them: inverse dynamics denoises only the actions)."""
        b, c, t, h, w = x0.shape
        noise, sigmas, conds, keeps = [], [], [], []
        for i, s in enumerate(seeds):
            n, sg, k, keep = self._draw(torch.Generator().manual_seed(s), (c, t, h, w))
            noise.append(n)
            sigmas.append(sg if sigma is None else sigma[i])
            conds.append(min(k, t - 1) if num_cond is None else min(num_cond[i], t))  # forced: all clean allowed
            keeps.append(keep if sigma is None else True)
        dev = x0.device
        x0 = x0.float()
        n = torch.stack(noise).to(dev)
        sig = torch.tensor(sigmas, device=dev, dtype=torch.float32)
        frame = torch.arange(t, device=dev).view(1, t)
        cond = (frame < torch.tensor(conds, device=dev).view(b, 1)).float()  # [B, T]
        cond5 = cond.view(b, 1, t, 1, 1)
        s5 = sig.view(b, 1, 1, 1, 1)
        x_t = cond5 * x0 + (1 - cond5) * (s5 * n + (1 - s5) * x0)
        timestep = cond5 * self.cond_timestep + (1 - cond5) * s5
        return FlowBatch(
            x_t=x_t, target=n - x0, timestep=timestep, condition_mask=cond5.expand(b, 1, t, h, w),
            loss_mask=1 - cond5, text_keep=torch.tensor(keeps, device=dev, dtype=torch.float32),
            sigma=sig, num_cond=torch.tensor(conds, device=dev),
        )

    @staticmethod
    def loss(pred: torch.Tensor, batch: FlowBatch) -> torch.Tensor:
        """Mean squared velocity error over the non-conditioning frames, averaged per sample."""
        err = (pred.float() - batch.target) ** 2 * batch.loss_mask
        c, h, w = pred.shape[1], pred.shape[3], pred.shape[4]
        per_sample = err.flatten(1).sum(1) / (batch.loss_mask.flatten(1).sum(1) * c * h * w).clamp_min(1)
        return per_sample.mean()


def flow_loss_from_config(cfg, family_defaults: dict | None = None) -> FlowMatchingLoss:
    """The objective configured by a TrainConfig; a field the config leaves unset takes the model
    family's recipe value where it has one (Cosmos 3: NVIDIA's timestep density, shift and conditioning)."""
    chosen = {k: v for k, v in (family_defaults or {}).items() if k not in cfg.model_fields_set}
    settings = dict(
        logit_mean=cfg.logit_mean, logit_std=cfg.logit_std, shift=cfg.shift,
        cond_frames_probs=tuple(sorted(cfg.cond_frames_probs.items())), cond_timestep=cfg.cond_timestep,
        text_dropout=cfg.text_dropout, time_distribution=cfg.time_distribution,
    )
    return FlowMatchingLoss(**{**settings, **chosen})
