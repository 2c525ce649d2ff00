"""The base of every config section, and the checks several sections share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for config sections: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _check_4k1(v: int) -> int:
    if v < 1 or (v - 1) % 4 != 0:
        lo = max(1, (v - 1) // 4 * 4 + 1)
        raise ValueError(f"num_frames must be of the form 4k+1 (the VAE compresses time 4x), got {v}; try {lo} or {lo + 4}")
    return v


FP8_DESCRIPTION = ("a labelled speed option: the transformer blocks' linear layers multiply in float8 through torchao "
                   "(e4m3, row-wise scales; CUDA GPUs of compute capability 8.9 or later; pip install "
                   "'worldtune[fp8]'). The frames differ from the bf16 model's by more than the noise floor "
                   "(docs/benchmarks.md has the figure); an adapter's own layers stay full precision")
