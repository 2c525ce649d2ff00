"""`[cache]`: the latent cache `worldtune cache` writes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from worldtune.config.section import Section


class CacheConfig(Section):
    """`worldtune cache`: VAE latents per clip and text embeddings per unique prompt."""

    dataset: str = Field("demo_out/dataset", description="prepared dataset folder")
    out: str | None = Field(None, description="cache folder; None = <dataset>/cache/<model-key>")
    batch_size: int = Field(4, description="clips per VAE call")
    text: Literal["auto", "raw", "projected"] = Field(
        "auto", description="raw encoder output (Predict2.5: 103 MB a prompt), projected (crossattn_proj output, "
        "1 MB; adapters only), auto = projected for Predict2.5, raw for Predict2")
    dtype: Literal["bf16", "fp32"] = Field("bf16", description="storage dtype of latents and embeddings")
    device: str = Field("auto", description="auto = cuda:<LOCAL_RANK> if available, else cpu")
    text_batch_size: int = Field(8, description="prompts per text-encoder call")
    vae_mode: Literal["auto", "eager", "compile", "channels_last", "tiled"] = Field(
        "auto", description="how the VAE runs: auto = the fastest mode that matched eager within bf16 noise on an "
        "H200 (benchmarks/vae_encode_bench.py) on CUDA, eager on CPU")
    vae_dtype: Literal["auto", "bf16", "fp32"] = Field(
        "auto", description="VAE compute dtype: auto = bf16 on CUDA (as the pipelines run it), fp32 on CPU")
    keep_clips: Literal["all", "val"] = Field(
        "val", description="`worldtune prepare --cache` only: clip mp4s kept after their latents are cached: all, "
        "or the held-out (val) clips plus `previews` training clips (first frames of every clip are always kept)")
    previews: int = Field(4, description="`prepare --cache` with keep_clips = val: training episodes whose clips "
                          "stay on disk as previews (the first N episodes)")

    @field_validator("batch_size", "text_batch_size")
    @classmethod
    def _batch_positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        return v
