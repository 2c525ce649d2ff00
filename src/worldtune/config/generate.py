"""`[generate]`: videos from a base model and adapters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from worldtune.config.section import FP8_DESCRIPTION, Section, _check_4k1
from worldtune.config.step_cache import StepCacheConfig


class AdapterSpec(Section):
    """One adapter to generate with."""

    path: str = Field(description="adapter folder (a run's export/) or its .safetensors file")
    scale: float = Field(1.0, description="LoRA scale")
    name: str | None = Field(None, description="model label; None = the run's name")


class GenerateConfig(Section):
    """`worldtune generate`: videos from (first frame, prompt) pairs, several seeds and adapters."""

    inputs: str = Field("demo_out/dataset", description="folder of NAME.png+NAME.txt, a .jsonl, or a prepared dataset")
    split: Literal["all", "val"] = Field("val", description="prepared dataset: held-out clips only, or all")
    out: str = Field("demo_out/generations", description="output folder")
    adapters: list[AdapterSpec] = Field(default_factory=list, description="adapters: [{path, scale, name}, ...]")
    include_base: bool = Field(True, description="also generate with the base model")
    fuse: bool = Field(False, description="merge the single adapter into the weights")
    transformer: str | None = Field(None, description="a full fine-tuned transformer folder")
    mode: Literal["image2world", "video2world", "text2world"] = Field("image2world", description="conditioning")
    cond_latent_frames: int = Field(1, description="video2world: 1 or 2 conditioning latent frames")
    seeds: list[int] = Field(default_factory=lambda: [0, 1], description="seeds per input")
    steps: int = Field(36, description="sampler steps")
    guidance: float = Field(7.0, description="classifier-free guidance (<= 1: off)")
    negative_prompt: str | None = Field(None, description="None = the pipeline's default")
    height: int | None = Field(None, description="None = the dataset's, else the model's")
    width: int | None = Field(None, description="None = the dataset's, else the model's")
    num_frames: int | None = Field(None, description="None = the dataset's, else the model's")
    max_inputs: int | None = Field(None, description="use only the first N inputs (sorted by name)")
    resize: Literal["pad", "crop"] = Field("pad", description="fit inputs of another aspect: letterbox or crop")
    split_views: bool = Field(True, description="also write each camera view of a multi-camera layout")
    sampler: Literal["worldtune", "pipeline"] = Field(
        "worldtune", description="Predict2.5: worldtune (the pipeline's algorithm, leaner) or the pipeline call")
    batch_guidance: bool = Field(True, description="both guidance branches in one batch-2 DiT call")
    compile: bool | None = Field(None, description="regional torch.compile of each block; None = on CUDA")
    fused_adaln: bool = Field(True, description="adaLN modulation per frame instead of per token")
    fp8: bool = Field(False, description=FP8_DESCRIPTION + "; not with generate.fuse")
    overlap_decode: bool = Field(True, description="on CUDA, decode each video on a stream of its own while the next "
                                 "video samples (the same frames; off CUDA videos decode one after another)")
    compile_vae: bool = Field(False, description="torch.compile the VAE decoder on CUDA (the first video of each shape "
                              "compiles it first)")
    cudnn_benchmark: bool | None = Field(None, description="let cuDNN time its convolution kernels for the VAE's "
                                         "shapes and keep the fastest; None = on CUDA")
    fps: float | None = Field(None, description="fps of the written mp4s (and Predict2's fps input); "
                              "None = the inputs' (dataset fps / stride), else the model's")
    layout: dict[str, Any] | None = Field(None, description="camera layout (as in a dataset's info.json) for "
                                          "folder/JSONL inputs")
    attention_backend: str | None = Field(None, description="pin SDPA to cudnn, flash, efficient or math")
    device: str = Field("auto", description="auto = cuda:<LOCAL_RANK> when CUDA is available, else cpu")
    cond_timestep: float = Field(1e-4, description="timestep of the clean conditioning frames (Predict2.5)")
    max_sequence_length: int | None = Field(None, description="text tokens; None = the model's")
    cache: StepCacheConfig = Field(default_factory=StepCacheConfig, description="a step cache on the transformer's "
                                   "blocks (kind = first_block or taylorseer): a labelled speed option, frames differ")
    baselines: list[Literal["first_frame", "vae_round_trip"]] = Field(
        default_factory=lambda: ["first_frame", "vae_round_trip"],
        description="baseline rows written beside the models' videos: first_frame (the conditioning frame held, no "
        "dynamics), vae_round_trip (the real clip through the model's VAE, the upper bound); [] for none")

    @model_validator(mode="after")
    def _check(self) -> "GenerateConfig":
        if self.num_frames is not None:
            _check_4k1(self.num_frames)
        for side, v in (("height", self.height), ("width", self.width)):
            if v is not None and (v <= 0 or v % 16):
                raise ValueError(f"generate.{side} must be a positive multiple of 16, got {v}; try {max(16, v // 16 * 16)}")
        if self.cond_latent_frames not in (1, 2):
            raise ValueError(f"generate.cond_latent_frames must be 1 or 2, got {self.cond_latent_frames}")
        if not self.seeds:
            raise ValueError("generate.seeds must list at least one seed")
        if self.steps <= 0:
            raise ValueError(f"generate.steps must be > 0, got {self.steps}")
        names = [a.name or a.path for a in self.adapters]
        if len(set(names)) != len(names):
            raise ValueError("generate.adapters: two adapters have the same name; give each a distinct `name`")
        if len(set(self.baselines)) != len(self.baselines):
            raise ValueError(f"generate.baselines lists a baseline twice: {self.baselines}")
        if self.fuse and self.fp8:
            raise ValueError("generate.fuse merges the adapter into bf16 weights, which generate.fp8 has replaced by "
                             "e4m3 ones: turn one of them off (fp8 runs an unfused LoRA's base layers in FP8)")
        return self
