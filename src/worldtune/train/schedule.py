"""Learning-rate multiplier: linear warmup to f_max, then linear decay from f_max to f_min.

This is NVIDIA's Cosmos recipe (warmup 1000, f_max 0.5, f_min 0.2 over the run). It is a function
of the optimizer step alone, so it is the same for any number of processes or accumulation steps.
"""

from __future__ import annotations

NVIDIA_WARMUP = 1000


def warmup_steps(warmup: int | None, total: int) -> int:
    """`train.warmup` in steps: as set, or (None) NVIDIA's 1000 but at most a tenth of the run, so that the
    default never contradicts a short run's `train.steps`."""
    return min(NVIDIA_WARMUP, total // 10) if warmup is None else warmup


def lr_multiplier(step: int, total: int, warmup: int, f_max: float, f_min: float) -> float:
    warmup = min(warmup, max(total - 1, 0))
    if step < warmup:
        return f_max * (step + 1) / warmup
    span = max(total - warmup, 1)
    frac = min(max(step - warmup, 0) / span, 1.0)
    return f_max + (f_min - f_max) * frac


def ema_decay(decay: float, step: int) -> float:
    """The EMA's decay after `step` optimizer steps, warmed up as (1 + step) / (10 + step) (diffusers' EMAModel):
    a fixed 0.999 would keep 55 % of the random start in the average after 600 steps."""
    return min(decay, (1 + step) / (10 + step))
