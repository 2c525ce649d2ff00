"""`[train]`: post-training (video, or the action tasks), its adapter, checkpoints and action settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from worldtune.config.section import Section, _check_4k1


class LoraConfig(Section):
    """Adapter settings of `train.mode = lora | dora`."""

    rank: int = Field(32, description="LoRA rank")
    alpha: float | None = Field(None, description="LoRA alpha; None = rank (scale alpha/rank = 1)")
    dropout: float = Field(0.0, description="LoRA dropout")
    targets: list[str] | None = Field(
        None, description="Linear module names that get adapters; None = the model family's (`worldtune model info` "
                          "lists them)")
    init: Literal["default", "gaussian"] = Field("default", description="peft's init of the adapter weights")

    @field_validator("rank")
    @classmethod
    def _rank_positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError(f"lora rank must be > 0, got {v}")
        return v


class CheckpointConfig(Section):
    """When checkpoints are written and which are kept."""

    every: int = Field(100, description="optimizer steps between checkpoints (0 = only at the end)")
    keep: int = Field(3, description="keep the newest K complete checkpoints")
    milestones: list[int] = Field(default_factory=list, description="steps whose checkpoints are never deleted")


ACTION_TIERS = (256, 480, 704, 720)  # Cosmos3OmniPipeline's action resolution tiers
ACTION_TASKS = ("forward_dynamics", "inverse_dynamics", "joint")  # train.task values that train on robot actions


class DynamicsConfig(Section):
    """Settings of the action tasks (`train.task` = forward_dynamics, inverse_dynamics or joint; Cosmos 3); read
    by `worldtune cache` too, since the cached latents and captions depend on them."""

    tier: int | Literal["auto"] = Field(
        "auto", description="action resolution tier (256, 480, 704, 720): clips are downscaled (never upscaled) "
        "and padded into the tier's canvas of the closest aspect ratio before VAE encoding, and the caption names "
        "the canvas, as the pipeline conditions a forward-dynamics run; generate at the same tier. auto = the "
        "smallest of 256, 480, 720 whose canvas holds the clips without downscaling (720 if none does)")
    view_point: Literal["auto", "ego_view", "third_person_view", "wrist_view", "concat_view"] = Field(
        "auto", description="camera sentence of the action caption; auto = concat_view for a grid of cameras, "
        "ego_view for one camera")
    init_from: str | None = Field(
        None, description="a new domain's action-projection rows start from this existing domain's rows (e.g. "
        "droid_lerobot); None = the checkpoint's values in the domain's slot")
    mode_weights: dict[str, float] = Field(
        default_factory=dict, description="joint task: how often each mode is drawn, relative, e.g. "
        "{forward_dynamics = 4, inverse_dynamics = 1, policy = 1} (a model that must learn to read its actions "
        "sees more forward dynamics); empty = each mode equally often, as NVIDIA's joint mode")

    @field_validator("tier")
    @classmethod
    def _tier(cls, v: int | str) -> int | str:
        if v != "auto" and v not in ACTION_TIERS:
            raise ValueError(f"train.dynamics.tier must be auto or one of {list(ACTION_TIERS)}, got {v!r}")
        return v

    @field_validator("mode_weights")
    @classmethod
    def _mode_weights(cls, v: dict[str, float]) -> dict[str, float]:
        modes = ("forward_dynamics", "inverse_dynamics", "policy")
        if any(k not in modes for k in v) or any(w < 0 for w in v.values()) or (v and not sum(v.values()) > 0):
            raise ValueError(f"train.dynamics.mode_weights: weights >= 0 (not all 0) of {', '.join(modes)}, got {v}")
        return v


class TrainConfig(Section):
    """`worldtune train`: rectified-flow post-training (LoRA, DoRA or full) of the DiT."""

    dataset: str = Field("demo_out/dataset", description="prepared dataset folder")
    task: Literal["video", "forward_dynamics", "inverse_dynamics", "joint"] = Field(
        "video", description="what the model learns: video = text/image/video to video; forward_dynamics = first "
        "frame + the clip's robot actions -> the video; inverse_dynamics = the whole clip -> its actions (what the "
        "cosmos3 trajectory labeller runs); joint = one of forward dynamics, inverse dynamics and policy (first "
        "frame -> video + actions) per clip, uniformly, as NVIDIA's joint action mode. The action tasks need a "
        "Cosmos 3 model and a dataset prepared with prepare.actions.key, and train the adapter with the "
        "embodiment domain's action-projection rows (input, plus output where actions are predicted)")
    dynamics: DynamicsConfig = Field(default_factory=DynamicsConfig, description="action-task settings")
    cache: str | None = Field("auto", description="latent cache folder; auto = <dataset>/cache/<model-key> if it "
                              "exists; none = decode clips every step")
    out: str = Field("demo_out/runs/lora", description="run folder (its name names the exported adapter)")
    mode: Literal["lora", "dora", "full"] = Field("lora", description="what is trained")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="adapter settings")
    ema: float | None = Field(None, description="EMA decay for full fine-tuning (e.g. 0.999; warmed up as "
                              "(1 + step) / (10 + step) until it reaches it); None = off")
    steps: int = Field(200, description="optimizer steps")
    batch_size: int = Field(1, description="clips per process per micro-batch")
    grad_accum: int = Field(1, description="micro-batches per optimizer step")
    lr: float = Field(2**-14.5, description="peak learning rate (times the schedule's multiplier); the default is "
                      "NVIDIA's 2^-14.5")
    weight_decay: float = Field(1e-3, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas")
    eps: float = Field(1e-8, description="AdamW epsilon")
    warmup: int | None = Field(None, description="linear warmup steps (below steps); none = NVIDIA's 1000, but at "
                               "most a tenth of steps")
    f_max: float = Field(0.5, description="lr multiplier at the end of warmup; decays linearly to f_min")
    f_min: float = Field(0.2, description="lr multiplier at the last step")
    grad_clip: float = Field(1.0, description="gradient norm clip (0 = off)")
    time_distribution: Literal["logitnormal", "waver"] = Field(
        "logitnormal", description="unshifted timestep distribution: logit-normal (Cosmos 2.5) or 'waver' (NVIDIA's "
                                   "Cosmos 3 video recipe). For a Cosmos 3 model, this, shift, cond_frames_probs and "
                                   "text_dropout default to NVIDIA's recipe when not set (waver; shift 3/5/10 at "
                                   "256p/480p/720p; 0.7/0.2/0.1; 0.1)")
    logit_mean: float = Field(0.0, description="mean of the logit-normal timestep distribution")
    logit_std: float = Field(1.0, description="std of the logit-normal timestep distribution")
    shift: float = Field(5.0, description="timestep shift s: sigma = s t / (1 + (s-1) t)")
    cond_frames_probs: dict[int, float] = Field(
        default_factory=lambda: {0: 0.5, 1: 0.25, 2: 0.25},
        description="probability of 0, 1 or 2 clean conditioning latent frames")
    cond_timestep: float = Field(1e-4, description="timestep of the clean conditioning frames")
    text_dropout: float = Field(0.2, description="probability of a zeroed text embedding (for guidance)")
    mixed_precision: Literal["bf16", "fp16", "no"] = Field("bf16", description="autocast dtype on CUDA")
    grad_checkpointing: str = Field(
        "auto", description="off | all | selective | every:N | blocks:N | auto (CUDA: selective, or with "
        "memory_auto as many whole blocks as memory allows; CPU: off)")
    memory_auto: bool = Field(False, description="with auto: checkpoint whole blocks as free memory requires "
                              "instead of selective")
    compile: bool | None = Field(None, description="regional torch.compile of each block; None = on CUDA")
    fused_adaln: bool = Field(True, description="adaLN modulation per frame instead of per token (same numbers)")
    fp8: bool = Field(False, description="a labelled speed option: torchao's float8 training (row-wise recipe) for "
                      "the transformer blocks' linear layers, the frozen base layers of lora/dora or every block "
                      "linear of a full fine-tune; the adapter's own layers stay bf16; CUDA GPUs of compute "
                      "capability 8.9 or later; pip install 'worldtune[fp8]'")
    fused_adamw: bool = Field(True, description="fused AdamW on CUDA")
    attention_backend: str | None = Field(None, description="pin SDPA to cudnn, flash, efficient or math; "
                                          "None = PyTorch's choice")
    view_attention: Literal["joint", "per_view"] = Field(
        "joint", description="multi-view model (separate views): attention across views or per view")
    fsdp: bool = Field(False, description="shard parameters, gradients and optimizer states over the processes "
                                          "(FSDP2): full fine-tuning, or adapters over a sharded frozen base")
    cpu_offload: bool = Field(False, description="FSDP2 CPU offload of parameters and optimizer states")
    num_frames: int | None = Field(None, description="frames per clip; None = the dataset's")
    seed: int = Field(42, description="seed of noise, timesteps, data order")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="checkpointing")
    resume: str | None = Field(None, description="None, auto (newest complete checkpoint), or a checkpoint folder")
    log_every: int = Field(10, description="steps between metrics rows (and log lines when not on a terminal)")
    val_every: int = Field(0, description="steps between validations; 0 = only at the end")
    val_samples: int = Field(2, description="held-out clips in the validation loss")
    val_videos: int = Field(1, description="held-out clips generated at each validation (fixed noise); 0 = none")
    val_steps: int = Field(8, description="sampler steps of validation videos")
    val_guidance: float = Field(7.0, description="guidance of validation videos")
    val_sigmas: list[float] = Field(default_factory=lambda: [0.1, 0.3, 0.6, 0.9],
                                    description="fixed noise levels of the validation loss")
    tensorboard: bool = Field(True, description="write <out>/tensorboard (scalars and the config)")
    wandb: bool = Field(False, description="log config, scalars and validation videos to Weights & Biases "
                        "(pip install 'worldtune[wandb]'; WANDB_MODE=offline works)")
    wandb_project: str = Field("worldtune", description="W&B project of the run")
    workers: int = Field(0, description="data loading processes")

    @field_validator("cache")
    @classmethod
    def _cache_none(cls, v: str | None) -> str | None:
        return None if v is not None and v.lower() == "none" else v

    @model_validator(mode="after")
    def _check(self) -> "TrainConfig":
        if self.num_frames is not None:
            _check_4k1(self.num_frames)
        if abs(sum(self.cond_frames_probs.values()) - 1.0) > 1e-6:
            raise ValueError(f"train.cond_frames_probs must sum to 1, got {self.cond_frames_probs}")
        if any(k not in (0, 1, 2) for k in self.cond_frames_probs):
            raise ValueError("train.cond_frames_probs keys must be 0, 1 or 2 conditioning latent frames")
        if not 0 <= self.text_dropout < 1:
            raise ValueError(f"train.text_dropout must be in [0, 1), got {self.text_dropout}")
        if self.fsdp and self.ema:
            raise ValueError("train.ema is not supported together with train.fsdp yet; use one of them")
        if self.task in ACTION_TASKS:
            default = type(self).model_fields["cond_frames_probs"].get_default(call_default_factory=True)
            if self.cond_frames_probs not in ({1: 1.0}, default):  # a saved config repeats the default
                raise ValueError(f"train.task = {self.task} fixes the clean frames by mode (exactly the first latent "
                                 "frame, or all of them for inverse dynamics): unset train.cond_frames_probs (or set "
                                 "it to {1 = 1.0})")
            if self.fsdp:
                raise ValueError(f"train.task = {self.task} trains on one process or DDP (LoRA/DoRA with the "
                                 "domain's action rows, or full): unset train.fsdp")
        if self.steps <= 0 or self.batch_size <= 0 or self.grad_accum <= 0:
            raise ValueError("train.steps, train.batch_size and train.grad_accum must be > 0")
        return self

    @field_validator("lr", "weight_decay")
    @classmethod
    def _finite_rate(cls, v: float, info) -> float:
        """A negative or infinite rate would reach the optimizer and fail there (or train backwards)."""
        if not (0 <= v < float("inf")) or (info.field_name == "lr" and v == 0):
            raise ValueError(f"train.{info.field_name} must be a finite number "
                             f"{'> 0' if info.field_name == 'lr' else '>= 0'}, got {v}")
        return v
