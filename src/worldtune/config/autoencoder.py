"""`[autoencoder]`: training a VAE for the seed models."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from worldtune.config.section import Section, _check_4k1


class AutoencoderConfig(Section):
    """`worldtune autoencoder`: train the model's VAE as an autoencoder on a prepared dataset's clips. It is the
    first step of a model made from scratch (the seed models): the transformer then learns on its latents."""

    dataset: str = Field("demo_out/dataset", description="prepared dataset folder (train split trains, val split "
                         "measures the held-out round trip)")
    out: str = Field("runs/vae", description="run folder: checkpoints, metrics.jsonl, run.json and vae/ (the trained "
                     "VAE as a diffusers folder, with its latent statistics)")
    train_part: Literal["all", "decoder"] = Field(
        "all", description="all: encoder and decoder learn (a VAE from scratch); decoder: the encoder and its latent "
        "statistics stay as they are, so a transformer trained on its latents keeps working, and only the decoder "
        "learns (a sharper decode of the same latents)")
    decoder_base_dim: int | None = Field(
        None, description="a new decoder of this width (random start) in place of the VAE's own; the encoder's "
        "weights are kept (None: the VAE's own decoder)")
    steps: int = Field(2000, description="optimizer steps")
    batch_size: int = Field(8, description="windows per step")
    frames: int | None = Field(
        None, description="frames per training window (4k+1; None: the clips' own length). A causal VAE decodes each "
        "chunk with the cache the chunks before it left: windows shorter than the clips never train the later caches, "
        "and the clips' last chunks decode several dB worse than their first")
    lr: float = Field(4e-4, description="peak learning rate (cosine decay to lr x lr_floor after warmup)")
    lr_floor: float = Field(0.05, description="final learning rate as a fraction of lr")
    warmup: int = Field(100, description="linear warmup steps")
    l1_weight: float = Field(1.0, description="weight of the L1 reconstruction loss")
    mse_weight: float = Field(1.0, description="weight of the squared-error reconstruction loss")
    kl_weight: float = Field(1e-6, description="weight of the KL term of the latent distribution")
    grad_clip: float = Field(1.0, description="gradient norm clip (0 = off)")
    mixed_precision: Literal["bf16", "no"] = Field("bf16", description="autocast dtype on CUDA (CPU: fp32)")
    val_every: int = Field(500, description="steps between held-out PSNR measurements (0 = only at the end)")
    val_clips: int = Field(8, description="held-out clips in the PSNR (whole clips, as the demo sees them)")
    log_every: int = Field(50, description="steps between metrics rows")
    checkpoint_every: int = Field(500, description="steps between checkpoints (0 = only at the end)")
    resume: str | None = Field("auto", description="None, auto (newest complete checkpoint) or a checkpoint folder")
    stats_clips: int = Field(64, description="train clips whose latents set the VAE's latents_mean / latents_std")
    device: str = Field("auto", description="auto = cuda if available, else cpu")
    seed: int = Field(0, description="seed of data order and latent sampling")

    @model_validator(mode="after")
    def _check(self) -> "AutoencoderConfig":
        if self.frames is not None:
            _check_4k1(self.frames)
        if self.steps <= 0 or self.batch_size <= 0:
            raise ValueError("autoencoder.steps and autoencoder.batch_size must be > 0")
        if self.decoder_base_dim is not None and self.decoder_base_dim <= 0:
            raise ValueError("autoencoder.decoder_base_dim must be > 0 (or unset: the VAE's own decoder)")
        return self
