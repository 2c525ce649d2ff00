"""`[generate.cache]` and `[serve.cache]`: diffusers' step caches, a labelled speed option (models/step_cache.py).

A step cache skips transformer work on denoising steps whose result it judges close to one it has already computed,
so its frames are not the uncached model's: each kind's quality cost on the trained seed demo is in
docs/benchmarks.md, and a kind whose cost exceeds what a fine-tuned adapter gains says so below.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from worldtune.config.section import Section

STEP_CACHE_KINDS = ("none", "first_block", "taylorseer")

# what each kind cost on the seed demos (docs/benchmarks.md, "Step caches"; benchmarks/step_cache_quality.py, 8 steps):
# no setting measured lowers dynamic PSNR by more than 0.04 dB, a tenth of the demo adapter's +0.34 dB gain
FIRST_BLOCK_COST = ("first_block: the first block runs every step; when its output moved less than `threshold` "
                    "(relative mean change) since the last full step, the other blocks are skipped and their last "
                    "change reused. Lossy: on the seed demos 0.05-0.2 computed 25-62 % of the steps and moved dynamic "
                    "PSNR by -0.03 to +0.05 dB (the adapter gains +0.34 dB)")
TAYLORSEER_COST = ("taylorseer: every `interval`-th step (after `warmup` full steps) runs the blocks; the steps "
                   "between extrapolate the blocks' output by a Taylor series of order `order`. Lossy: on the "
                   "Predict2.5 seed demo its frames moved about twice as far from the uncached ones as first_block's, "
                   "and their PSNR against the real video rose by 0.34-0.47 dB, as much as the demo adapter gains: "
                   "compare only runs made with the same cache setting")


class StepCacheConfig(Section):
    """One of diffusers' step caches on the transformer's repeated blocks; `kind = "none"` runs every block."""

    kind: Literal["none", "first_block", "taylorseer"] = Field(
        "none", description="none (every block every step), first_block or taylorseer: a labelled speed option whose "
        "frames differ from the uncached model's (docs/benchmarks.md has each kind's measured cost)")
    threshold: float = Field(0.05, description=FIRST_BLOCK_COST + "; 0 caches nothing")
    interval: int = Field(2, description=TAYLORSEER_COST + "; 1 caches nothing")
    warmup: int = Field(3, description="taylorseer: full steps before the first extrapolated one")
    order: int = Field(1, description="taylorseer: order of the Taylor series (1: linear in the step)")

    @field_validator("kind", mode="before")
    @classmethod
    def _none(cls, v):
        return "none" if v is None else v  # `--generate.cache.kind none` reads as None on the command line

    @model_validator(mode="after")
    def _check(self) -> "StepCacheConfig":
        if self.threshold < 0:
            raise ValueError(f"cache.threshold must be >= 0 (0 caches nothing), got {self.threshold}")
        if self.interval < 1:
            raise ValueError(f"cache.interval must be >= 1 (1 caches nothing), got {self.interval}")
        if self.warmup < 1:
            raise ValueError(f"cache.warmup must be >= 1 (the first step has nothing to extrapolate from), got "
                             f"{self.warmup}")
        if self.order < 0:
            raise ValueError(f"cache.order must be >= 0, got {self.order}")
        return self

    @property
    def label(self) -> str | None:
        """What the cache is, for rows, hashes and messages; None when off."""
        if self.kind == "first_block":
            return f"first_block(threshold={self.threshold:g})"
        if self.kind == "taylorseer":
            return f"taylorseer(interval={self.interval}, warmup={self.warmup}, order={self.order})"
        return None
