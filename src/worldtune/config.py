"""Typed configs for every stage, loaded from TOML and overridable from the command line.

One TOML file may hold any of the sections `[model]`, `[prepare]`, `[cache]`, `[train]`,
`[generate]`, `[evaluate]`, `[report]`; each command reads the sections it needs. Every field has
a default that works on the tiny demo, so an empty file is a valid config. Overrides use dotted
paths, torchtitan style: `--train.steps 100 --train.lora.rank 8`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from worldtune.data.frame_size import nearest_multiples
from worldtune.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Section(BaseModel):
    """Base for config sections: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ----------------------------------------------------------------------------------------- model
class ModelConfig(Section):
    """Which model: a local diffusers directory or cached hub id (real weights), or a registry name."""

    name: str | None = Field(None, description="registry name (tiny-predict2.5, cosmos-predict2.5-2b, ...); "
                             "None = taken from `path`, or tiny-predict2.5 without one")
    path: str | None = Field(None, description="diffusers-format pipeline folder, or a hub id (org/name) already "
                             "in the local Hugging Face cache; never downloaded")
    revision: str | None = Field(None, description="hub revision (branch, tag or commit) when `path` is a hub id")
    random_weights: bool = Field(False, description="allow a real-size `name` without `path`: random weights "
                                 "(benchmarks only)")
    dtype: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="weights dtype on CUDA (CPU: fp32)")
    seed: int = Field(0, description="seed of random initialisation from a registry spec")


# --------------------------------------------------------------------------------------- prepare
class GridConfig(Section):
    """A rows x cols tiling; `cells` maps camera role -> [row, col]. Unmapped cells are black."""

    rows: int = Field(2, description="tile rows")
    cols: int = Field(2, description="tile columns")
    cells: dict[str, tuple[int, int]] = Field(
        default_factory=lambda: {"exterior_1": (0, 0), "exterior_2": (0, 1), "wrist": (1, 0)},
        description="camera role -> [row, col]; unmapped cells are black")


class ActionsConfig(Section):
    """Robot actions kept beside each clip (for action-conditioned Cosmos 3 models); off unless `key` is set."""

    key: str | None = Field(None, description="the dataset's action feature (LeRobot: `action`); None = no actions")
    state_key: str | None = Field(None, description="a state feature kept beside the actions "
                                  "(`observation.state`); None = none")
    domain: str | None = Field(None, description="Cosmos 3 embodiment domain: an existing one whose actions have the "
                               "same width and meaning (droid_lerobot: 10-D pose deltas + gripper), or a new name; "
                               "None = a new domain named after the robot")
    domain_id: int | None = Field(None, description="slot of a new domain; None = the highest free slot")
    normalization: Literal["auto", "none", "quantile", "meanstd", "minmax"] = Field(
        "auto", description="how training scales actions (statistics of the training episodes are always stored): "
        "quantile maps q01..q99 to -1..1; auto = none for an existing domain (NVIDIA's DROID recipe feeds raw "
        "actions), quantile for a new one")


class PrepareConfig(Section):
    """`worldtune prepare`: a LeRobot (v2.x, v3) or plain video dataset into training clips."""

    source: str = Field("demo_out/lerobot", description="dataset root: LeRobot, or videos/*.mp4 + metas/*.txt")
    out: str = Field("demo_out/dataset", description="prepared dataset folder")
    cameras: dict[str, str] = Field(
        default_factory=lambda: {
            "exterior_1": "observation.images.exterior_1_left",
            "exterior_2": "observation.images.exterior_2_left",
            "wrist": "observation.images.wrist_left",
        },
        description="camera role -> dataset feature key (a plain videos/ folder has one camera: `video`)")
    layout: Literal["grid", "separate", "single"] = Field(
        "grid", description="cameras tiled in one frame, one mp4 per camera, or exactly one camera")
    grid: GridConfig = Field(default_factory=GridConfig, description="the tiling of the grid layout")
    num_frames: int = Field(17, description="frames per clip (4k+1)")
    stride: int = Field(1, description="take every stride-th source frame")
    clip_policy: Literal["episode", "sliding"] = Field(
        "episode", description="one clip from each episode's start, or sliding windows")
    overlap: int = Field(0, description="frames shared by consecutive sliding windows")
    height: int = Field(64, description="output height (of the whole grid frame)")
    width: int = Field(112, description="output width (of the whole grid frame)")
    fps: float | None = Field(None, description="fps written into the clips; None = source fps / stride")
    resize: Literal["pad", "crop"] = Field("pad", description="aspect kept: pad with black, or center crop")
    prompt_template: str = Field("droid_grid", description="preset (droid_grid, gr1, plain) or a text with {task}")
    missing_task: Literal["skip", "fallback"] = Field(
        "fallback", description="episodes without task text: drop them, or use fallback_task")
    fallback_task: str = Field("performs a task.", description="task text of episodes without one")
    only_successful: bool = Field(False, description="drop episodes flagged unsuccessful")
    max_episodes: int | None = Field(None, description="read only the first N episodes")
    val_fraction: float = Field(0.1, description="episodes held out (split=val) for validation and generation")
    seed: int = Field(0, description="which episodes are held out")
    workers: int = Field(2, description="encoding processes")
    codec: str = Field("libx264", description="video codec of the written clips")
    crf: int = Field(18, description="x264 constant rate factor (lower = better quality)")
    preset: str = Field("medium", description="x264 preset of the written clips")
    actions: ActionsConfig = Field(default_factory=ActionsConfig, description="robot actions beside each clip")

    @field_validator("num_frames")
    @classmethod
    def _frames_4k1(cls, v: int) -> int:
        return _check_4k1(v)

    @field_validator("height", "width")
    @classmethod
    def _even(cls, v: int, info) -> int:
        """yuv420p video stores colour at half resolution: a frame needs even, positive sides (a grid's
        cells too: checked when the layout is built, as it needs both fields and the grid)."""
        if v < 2 or v % 2:
            raise ValueError(f"{info.field_name} must be a positive even number (yuv420p video), got {v}; "
                             f"use {nearest_multiples(v, 2)}")
        return v


# ----------------------------------------------------------------------------------------- cache
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


# ----------------------------------------------------------------------------------------- train
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

    @field_validator("tier")
    @classmethod
    def _tier(cls, v: int | str) -> int | str:
        if v != "auto" and v not in ACTION_TIERS:
            raise ValueError(f"train.dynamics.tier must be auto or one of {list(ACTION_TIERS)}, got {v!r}")
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
    ema: float | None = Field(None, description="EMA decay for full fine-tuning (e.g. 0.999); None = off")
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
            if self.mode == "full" or self.fsdp:
                raise ValueError(f"train.task = {self.task} trains LoRA/DoRA adapters with the domain's action "
                                 "rows on one process or DDP: use train.mode = lora or dora, without train.fsdp")
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


# ---------------------------------------------------------------------------------- autoencoder
class AutoencoderConfig(Section):
    """`worldtune autoencoder`: train the model's VAE as an autoencoder on a prepared dataset's clips. It is the
    first step of a model made from scratch (the seed models): the transformer then learns on its latents."""

    dataset: str = Field("demo_out/dataset", description="prepared dataset folder (train split trains, val split "
                         "measures the held-out round trip)")
    out: str = Field("runs/vae", description="run folder: checkpoints, metrics.jsonl, run.json and vae/ (the trained "
                     "VAE as a diffusers folder, with its latent statistics)")
    steps: int = Field(2000, description="optimizer steps")
    batch_size: int = Field(8, description="windows per step")
    frames: int = Field(5, description="frames per training window (4k+1)")
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
        _check_4k1(self.frames)
        if self.steps <= 0 or self.batch_size <= 0:
            raise ValueError("autoencoder.steps and autoencoder.batch_size must be > 0")
        return self


# -------------------------------------------------------------------------------------- generate
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
    fps: float | None = Field(None, description="fps of the written mp4s (and Predict2's fps input); "
                              "None = the inputs' (dataset fps / stride), else the model's")
    layout: dict[str, Any] | None = Field(None, description="camera layout (as in a dataset's info.json) for "
                                          "folder/JSONL inputs")
    attention_backend: str | None = Field(None, description="pin SDPA to cudnn, flash, efficient or math")
    device: str = Field("auto", description="auto = cuda:<LOCAL_RANK> when CUDA is available, else cpu")
    cond_timestep: float = Field(1e-4, description="timestep of the clean conditioning frames (Predict2.5)")
    max_sequence_length: int | None = Field(None, description="text tokens; None = the model's")
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
        return self


# -------------------------------------------------------------------------------------- evaluate
class ActionEvalConfig(Section):
    """`evaluate.mode = "actions"`: a Cosmos 3 forward-dynamics model driven by a prepared dataset's real actions,
    scored against what really happened; and again by another episode's actions, to see that the actions matter."""

    dataset: str = Field("demo_out/dataset", description="a prepared dataset with actions (prepare.actions.key): its "
                         "held-out clips give the first frame, the action chunk and the real continuation")
    adapters: list[AdapterSpec] = Field(default_factory=list, description="forward-dynamics adapters (a "
                                        "forward-dynamics run's export/): [{path, scale, name}, ...]")
    include_base: bool = Field(True, description="also drive the base model (its checkpoint's rows for the domain)")
    split: Literal["val", "all"] = Field("val", description="which clips: the held-out ones, or all")
    clips_per_episode: int = Field(1, description="clips of one episode used (its first ones); inputs of one episode "
                                   "share its scene, so more clips add less than more episodes")
    max_inputs: int | None = Field(None, description="use only the first N clips (sorted by name)")
    seeds: list[int] = Field(default_factory=lambda: [0], description="seeds per clip")
    steps: int = Field(35, description="denoising steps (the pipeline's default)")
    guidance: float = Field(1.0, description="classifier-free guidance on the task text (1 = off, half the cost): "
                            "the actions, not the text, are what is evaluated")
    tier: int | Literal["auto"] = Field("auto", description="action resolution tier; auto = the adapter's (what it was "
                                        "trained at), else the smallest whose canvas holds the clips")
    view_point: Literal["auto", "ego_view", "third_person_view", "wrist_view", "concat_view"] = Field(
        "auto", description="camera sentence of the caption; auto = the adapter's, else concat_view for a grid and "
        "ego_view for one camera")
    other_actions: bool = Field(True, description="also drive every model by another episode's actions (a seeded "
                                "derangement: no clip keeps its own episode's actions) for the action-sensitivity figure")
    shuffle_seed: int = Field(0, description="seed of the derangement that gives each clip another episode's actions")
    device: str = Field("auto", description="auto = cuda when available, else cpu")

    @field_validator("tier")
    @classmethod
    def _tier(cls, v: int | str) -> int | str:
        if v != "auto" and v not in ACTION_TIERS:
            raise ValueError(f"evaluate.actions.tier must be auto or one of {list(ACTION_TIERS)}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> "ActionEvalConfig":
        if self.steps < 1 or self.clips_per_episode < 1 or not self.seeds:
            raise ValueError("evaluate.actions: steps and clips_per_episode must be >= 1 and seeds non-empty")
        return self


class EvaluateConfig(Section):
    """`worldtune evaluate`: Sampson geometry, pixel metrics against the real clip, a VLM judge."""

    runs: list[str] = Field(default_factory=lambda: ["demo_out/generations"],
                            description="generation folders written by `worldtune generate`")
    out: str = Field("demo_out/eval", description="output folder: results.json, videos.jsonl, videos.csv")
    metrics: list[str] = Field(default_factory=lambda: ["sampson_temporal", "sampson_crossview", "pixels"],
                               description="sampson_temporal, sampson_crossview, pixels (= psnr, ssim, dynamic_psnr, "
                                           "motion_iou_spatial, motion_iou_spatiotemporal, warp_error), "
                                           "judge_physics, judge_instruction, judge:<rubric>")
    dataset: str | None = Field(None, description="the prepared dataset the generations came from; its cameras.json "
                                                  "gives calibrated geometry (None: found from the generations' info.json)")
    judge_endpoint: str | None = Field(None, description="OpenAI-compatible chat-completions URL of the judge (None: no judge)")
    judge_model: str = Field("nvidia/Cosmos-Reason2-2B", description="model name sent to the judge")
    judge_rubrics: list[str] = Field(default_factory=lambda: ["physical_plausibility", "instruction_following"],
                                     description="rubric names or YAML paths")
    judge_fps: float = Field(16.0, description="frame rate the judge is told / samples at")
    judge_concurrency: int = Field(4, description="judge requests in flight")
    workers: int = Field(2, description="processes for Sampson and pixel metrics")
    frame_gap: int = Field(1, description="temporal Sampson: frame t vs t + gap")
    min_inliers: int = Field(15, description="distinct inliers a fitted F needs")
    judge_input: Literal["video", "images"] = Field("video", description="one mp4 video part, or JPEG image parts")
    judge_max_images: int = Field(32, description="images mode: frames sent at most")
    judge_timeout: float = Field(300.0, description="seconds per judge request")
    judge_retries: int = Field(4, description="extra attempts on 5xx/429/timeouts, exponential backoff")
    judge_max_tokens: int = Field(512, description="reply length limit")
    judge_api_key_env: str | None = Field(None, description="environment variable holding a bearer token")
    judge_extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into each judge request")
    sampson_geometry: Literal["auto", "calibrated", "reference", "selffit"] = Field(
        "auto", description="F to score against: calibrated cameras, the real clip's rig, or the video's own "
                            "(auto: the first that exists, see docs/eval.md)")
    sampson_max_features: int = Field(2000, description="SIFT keypoints per frame")
    sampson_frame_step: int = Field(1, description="evaluate every k-th frame (pair)")
    sampson_crossview_step: int = Field(1, description="cross-view: score every k-th of those frames (2 halves the SIFT cost)")
    sampson_min_motion: float = Field(0.5, description="temporal pairs whose tracks move less (median, px) are static: skipped")
    sampson_moving_views: list[str] = Field(default_factory=lambda: ["wrist"],
                                            description="without calibration: roles containing these are moving cameras")
    sampson_masks: dict[str, list[tuple[float, float, float, float]]] = Field(
        default_factory=dict, description="role -> boxes [x0, y0, x1, y1] (fractions) of camera-fixed pixels to ignore")
    sampson_auto_masks: bool = Field(True, description="find camera-fixed pixels (a gripper) of moving views in the real clip")
    sampson_gate: float = Field(6.0, description="reference scoring: matches farther from the rig's geometry (px) are wrong matches")
    pixel_start: int = Field(1, description="pixel metrics: leading frames given to the model, not scored")
    max_videos: int | None = Field(None, description="evaluate only the first N rows of each folder (quick looks)")
    mode: Literal["videos", "actions"] = Field(
        "videos", description="videos: score the generation folders of evaluate.runs; actions: first generate with a "
        "Cosmos 3 forward-dynamics model under a prepared dataset's real actions (evaluate.actions) into "
        "<out>/generations, then score that folder (pixel metrics per view and over the horizon, action sensitivity)")
    actions: ActionEvalConfig = Field(default_factory=ActionEvalConfig, description="the actions mode's settings")


class ReportConfig(Section):
    """`worldtune report`: one HTML page and a Markdown summary of an evaluation and training runs."""

    eval: str = Field("demo_out/eval", description="the evaluation folder to show (evaluate.out)")
    runs: list[str] = Field(default_factory=list, description="training run folders (train.out) whose loss "
                            "curves are drawn")
    out: str = Field("demo_out/report", description="folder of report.html, report.md and their assets")
    title: str = Field("worldtune report", description="the page's title")
    video_format: Literal["auto", "mp4", "webm"] = Field("auto", description="auto: copy H.264/VP9/AV1 as they are, "
                                                         "re-encode others to WebM; webm: always WebM")
    max_examples: int = Field(12, description="example rows (input and seed) shown with their videos")


class CompareConfig(Section):
    """`worldtune compare`: the grid and separate camera views trained, generated and scored side by side."""

    out: str = Field("demo_out/compare", description="folder of both branches and the comparison report")
    view_height: int | None = Field(None, description="per-view height of the separate branch; None = about the "
                                    "grid's tokens")
    view_width: int | None = Field(None, description="per-view width of the separate branch")

    @model_validator(mode="after")
    def _check(self) -> "CompareConfig":
        if (self.view_height is None) != (self.view_width is None):
            raise ValueError("set both compare.view_height and compare.view_width, or neither")
        for side, v in (("view_height", self.view_height), ("view_width", self.view_width)):
            if v is not None and (v <= 0 or v % 16):
                raise ValueError(f"compare.{side} must be a positive multiple of 16, got {v}")
        return self


# ------------------------------------------------------------------------------------------- idm
class IdmConfig(Section):
    """`worldtune idm train`: an inverse-dynamics model (frames -> action chunk) trained from scratch."""

    dataset: str = Field("demo_out/lerobot", description="LeRobot dataset (v2.x/v3) whose real episodes teach the "
                                                          "model: its camera videos and its action column")
    out: str = Field("demo_out/runs/idm", description="run folder: checkpoints, metrics.jsonl, idm_report.json and "
                                                      "the trained model under idm/")
    cameras: dict[str, str] = Field(
        default_factory=lambda: {
            "exterior_1": "observation.images.exterior_1_left",
            "exterior_2": "observation.images.exterior_2_left",
            "wrist": "observation.images.wrist_left",
        },
        description="camera role -> dataset feature key; the roles are the layout's (generated videos are split "
                    "into these roles), so use the same mapping as prepare.cameras")
    action_key: str = Field("action", description="the dataset feature holding the per-frame action vector")
    view_height: int = Field(32, description="height each camera view is resized to (match a grid cell of the "
                                             "generated videos: then labelling sees what training saw)")
    view_width: int = Field(56, description="width each camera view is resized to")
    resize: Literal["pad", "crop"] = Field("pad", description="aspect-keeping resize: letterbox or centre crop "
                                                              "(use prepare.resize)")
    horizon: int = Field(4, description="actions predicted per window (the chunk); the input is frames t..t+horizon")
    channels: int = Field(16, description="width of the first conv layer (doubled twice)")
    steps: int = Field(300, description="optimizer steps")
    batch_size: int = Field(16, description="windows per step per process")
    lr: float = Field(2e-3, description="AdamW peak learning rate (linear warmup, cosine decay to 10%)")
    warmup: int = Field(30, description="warmup steps")
    weight_decay: float = Field(1e-4, description="AdamW weight decay")
    grad_clip: float = Field(1.0, description="gradient norm clip")
    val_fraction: float = Field(0.2, description="fraction of episodes held out for the report (at least one)")
    max_episodes: int | None = Field(None, description="use only the first N episodes (quick looks)")
    seed: int = Field(0, description="held-out split, initialisation and window order")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="checkpoint cadence and rotation")
    resume: str | None = Field(None, description='None (fresh run), "auto" (newest complete checkpoint) or a '
                                                 "checkpoint folder")
    log_every: int = Field(20, description="steps between metrics.jsonl rows")
    device: str = Field("auto", description="auto = cuda:<LOCAL_RANK> when CUDA is available, else cpu")
    label_batch: int = Field(64, description="windows per forward pass when labelling videos")

    @model_validator(mode="after")
    def _check(self) -> "IdmConfig":
        if self.horizon < 1 or self.steps < 1 or self.batch_size < 1:
            raise ValueError("idm.horizon, idm.steps and idm.batch_size must be >= 1")
        for side, v in (("view_height", self.view_height), ("view_width", self.view_width)):
            if v < 8:
                raise ValueError(f"idm.{side} must be >= 8 pixels, got {v}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"idm.val_fraction must be in (0, 1), got {self.val_fraction}")
        return self


class Cosmos3LabelConfig(Section):
    """`trajectories.labeller = "cosmos3"`: actions from Cosmos 3's own `inverse_dynamics` mode (the [model], base or
    with an action adapter: for a new robot, one trained with train.task = "inverse_dynamics" or "joint"), scaled
    back to the dataset's units with the actions' statistics."""

    dataset: str | None = Field(None, description="the prepared dataset (with actions) the generations came from: its "
                                "action domain, names, normalisation statistics and camera keys; None = the generation "
                                "folder's info.json `dataset`")
    adapter: str | None = Field(None, description="an action adapter folder (LoRA + the domain's rows, its action "
                                "scaling); for a new robot train it with train.task = \"inverse_dynamics\" (or "
                                "\"joint\"): only that trains the domain's action output rows the labels come "
                                "through. None = the base model")
    chunk: int | None = Field(None, description="actions per inverse-dynamics window (a multiple of 4); None = the "
                              "adapter's chunk, else the dataset's clip length - 1")
    steps: int = Field(35, description="denoising steps of the actions")
    guidance: float = Field(1.0, description="classifier-free guidance on the task text (1 = off)")
    tier: int | Literal["auto"] = Field("auto", description="action resolution tier; auto = the adapter's, else the "
                                        "smallest whose canvas holds the frames")
    view_point: Literal["auto", "ego_view", "third_person_view", "wrist_view", "concat_view"] = Field(
        "auto", description="camera sentence of the caption; auto = the adapter's, else by the layout")
    seed: int = Field(0, description="noise seed of every window")
    compare_clips: int = Field(8, description="held-out clips of the dataset labelled by both labellers for the "
                               "comparison in the dataset's report (needs an IDM at trajectories.idm); 0 = no comparison")

    @field_validator("tier")
    @classmethod
    def _tier(cls, v: int | str) -> int | str:
        if v != "auto" and v not in ACTION_TIERS:
            raise ValueError(f"trajectories.cosmos3.tier must be auto or one of {list(ACTION_TIERS)}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Cosmos3LabelConfig":
        if self.chunk is not None and (self.chunk < 4 or self.chunk % 4):
            raise ValueError(f"trajectories.cosmos3.chunk must be a positive multiple of 4, got {self.chunk}")
        if self.steps < 1 or self.compare_clips < 0:
            raise ValueError("trajectories.cosmos3.steps must be >= 1 and compare_clips >= 0")
        return self


class TrajectoriesConfig(Section):
    """`worldtune trajectories`: generated videos + an IDM -> a LeRobot v3.0 dataset with actions."""

    labeller: Literal["idm", "cosmos3"] = Field(
        "idm", description="who labels the generated videos with actions: idm = worldtune's inverse-dynamics model "
        "(trajectories.idm); cosmos3 = Cosmos 3's inverse_dynamics mode of the [model] (trajectories.cosmos3)")
    cosmos3: Cosmos3LabelConfig = Field(default_factory=Cosmos3LabelConfig,
                                        description="the cosmos3 labeller's settings")

    generations: str = Field("demo_out/generations", description="a folder written by `worldtune generate`")
    source: str | None = Field(None, description="instead of the generations: a LeRobot dataset or a folder of "
                               "videos (videos/*.mp4 + metas/*.txt) without actions, labelled by the IDM")
    idm: str = Field("demo_out/runs/idm", description="an IDM run folder (or its idm/ folder) from `worldtune idm train`")
    out: str = Field("demo_out/trajectories", description="the LeRobot v3.0 dataset to write; must not exist yet")
    models: list[str] = Field(default_factory=list, description="generation model labels to export (e.g. [\"lora\"]); "
                                                                "empty = every generated video")
    evaluation: str | None = Field(None, description="an evaluation folder (`worldtune evaluate`): its per-video "
                                                     "scores become episode columns score/<metric>")
    thresholds: dict[str, float] = Field(default_factory=dict, description="metric -> bound; keep an episode only "
                                         "if its score passes (<= for lower-is-better metrics, >= otherwise); a "
                                         "missing score fails")
    merge_with: str | None = Field(None, description="a real LeRobot dataset whose episodes are written first "
                                                     "(is_synthetic = false) with the same features")
    codec: Literal["h264", "av1"] = Field("h264", description="video codec of the written files (av1 = libsvtav1, "
                                                              "as lerobot writes)")
    lossless: bool = Field(True, description="lossless encoding: decoded frames equal the generated ones exactly")
    crf: int | None = Field(None, description="quality when lossless = false; None = 18 (h264) or 30 (av1)")
    gop: int = Field(2, description="keyframe interval (small = fast random access, as lerobot)")
    episodes_per_file: int = Field(500, description="episodes concatenated per video/data file")
    robot_type: str | None = Field(None, description="robot_type in info.json; None = the IDM dataset's")
    device: str = Field("auto", description="device of the IDM: auto = cuda when available, else cpu")

    @model_validator(mode="after")
    def _check(self) -> "TrajectoriesConfig":
        if self.gop < 1 or self.episodes_per_file < 1:
            raise ValueError("trajectories.gop and trajectories.episodes_per_file must be >= 1")
        return self


# ----------------------------------------------------------------------------------------- serve
class ServeJudgeConfig(Section):
    """`[serve.judge]`: score every recorded rollout with the VLM judge (eval/judge.py) when it ends.

    Separate from `[evaluate]`'s judge_* keys because a server asks one rollout at a time while a policy
    waits for its `end` answer: the defaults fail fast (short timeout, one retry, a breaker that retries
    after a minute) where an offline evaluation can afford to wait."""

    endpoint: str | None = Field(None, description="OpenAI-compatible chat-completions URL of the judge (a vLLM "
                                 "server of Cosmos-Reason2: http://localhost:8000/v1); None = rollouts are not judged")
    model: str = Field("nvidia/Cosmos-Reason2-2B", description="model name sent to the judge")
    success_rubric: str = Field("task_success", description="rubric (shipped name or YAML path) whose top score means "
                                "the task is done; gives `success`")
    progress_rubric: str = Field("task_progress", description="rubric (shipped name or YAML path) scoring how far the "
                                 "task got; its score scaled to 0..1 gives `progress`")
    extra_rubrics: list[str] = Field(default_factory=list, description="more rubrics to ask each rollout (e.g. "
                                     "physical_plausibility); their scores are reported under `rubrics`")
    fps: float = Field(16.0, description="frame rate the episode's video is resampled to for the judge (at most the "
                       "episode's own)")
    input: Literal["video", "images"] = Field("video", description="one mp4 video part, or JPEG image parts")
    max_images: int = Field(32, description="images mode: frames sent at most")
    timeout: float = Field(120.0, description="seconds per judge request")
    retries: int = Field(1, description="extra attempts on 5xx/429/timeouts/refused connections, exponential backoff")
    backoff: float = Field(1.0, description="seconds before the first retry; doubles each retry")
    max_tokens: int = Field(512, description="reply length limit")
    max_consecutive_failures: int = Field(2, description="circuit breaker: after this many failed requests in a row "
                                          "the judge is not asked (scores None, error reported)")
    retry_after: float = Field(60.0, description="seconds an open circuit breaker waits before asking the judge again")
    api_key_env: str | None = Field(None, description="environment variable holding a bearer token")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into each judge request (e.g. "
                                       "{mm_processor_kwargs = {fps = 16}} on vLLM)")

    @model_validator(mode="after")
    def _check(self) -> "ServeJudgeConfig":
        if self.fps <= 0 or self.timeout <= 0:
            raise ValueError("serve.judge.fps and serve.judge.timeout must be > 0")
        if self.retries < 0 or self.backoff < 0 or self.retry_after < 0:
            raise ValueError("serve.judge.retries, backoff and retry_after must be >= 0")
        if self.max_consecutive_failures < 1 or self.max_images < 1 or self.max_tokens < 1:
            raise ValueError("serve.judge.max_consecutive_failures, max_images and max_tokens must be >= 1")
        return self


class ServeConfig(Section):
    """`worldtune serve`: a Cosmos 3 forward-dynamics world model kept loaded, stepped by a policy over HTTP."""

    host: str = Field("127.0.0.1", description="address to bind; the server has no authentication, so keep it on "
                      "the loopback unless the network is trusted")
    port: int = Field(8765, description="TCP port; 0 = any free port (printed at start)")
    adapter: str | None = Field(None, description="a forward-dynamics adapter folder (`worldtune export` of a "
                                "forward-dynamics run): LoRA, the domain's action rows and its action normalisation")
    dataset: str | None = Field(None, description="a prepared dataset (`worldtune prepare`): its camera layout, frame "
                                "size, fps and, from actions.json, the action domain and normalisation")
    domain: str = Field("droid_lerobot", description="existing Cosmos 3 action domain when neither adapter nor dataset "
                        "names one")
    layout: dict[str, Any] | None = Field(None, description="camera layout (as in a dataset's info.json); None = the "
                                          "dataset's, else one camera")
    height: int | None = Field(None, description="model frame height; None = the dataset's, else the first frame's "
                               "(fitted to the tier)")
    width: int | None = Field(None, description="model frame width; None = the dataset's, else the first frame's")
    fps: float | None = Field(None, description="frame rate told to the model and written to the episodes; None = "
                              "the adapter's, else the dataset's, else 15")
    chunk_size: int | None = Field(None, description="actions per step (a multiple of 4); None = any multiple of 4")
    steps: int = Field(35, description="denoising steps per chunk")
    guidance: float = Field(6.0, description="classifier-free guidance on the instruction (1 = off, half the cost)")
    tier: int | Literal["auto"] = Field("auto", description="the pipeline's action resolution tier (256, 480, 704, "
                                        "720); auto = the adapter's, else the smallest whose canvas holds the frames")
    view_point: Literal["auto", "ego_view", "third_person_view", "wrist_view", "concat_view"] = Field(
        "auto", description="camera framing sentence of the caption; auto = the adapter's, else concat_view for a "
        "grid and ego_view for one camera")
    actions: Literal["raw", "normalized"] = Field("raw", description="raw: the server scales the policy's actions with "
                                                  "the adapter's/dataset's normalisation; normalized: already scaled")
    record: str | None = Field("serve_out/episodes", description="folder of recorded rollouts (one LeRobot v3.0 "
                               "dataset per episode); None = do not record")
    lossless: bool = Field(True, description="lossless video in the recorded episodes")
    device: str = Field("auto", description="auto = cuda when available, else cpu")
    judge: ServeJudgeConfig = Field(default_factory=ServeJudgeConfig, description="score each recorded rollout "
                                    "with a VLM judge (success, progress) when serve.judge.endpoint is set")

    @model_validator(mode="after")
    def _check(self) -> "ServeConfig":
        if self.judge.endpoint and self.record is None:
            raise ValueError("serve.judge.endpoint is set but serve.record is none: the judge scores the recorded "
                             "episode, so set serve.record to a folder (or unset the endpoint)")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"serve.port must be 0..65535, got {self.port}")
        if self.chunk_size is not None and (self.chunk_size < 4 or self.chunk_size % 4):
            raise ValueError(f"serve.chunk_size must be a positive multiple of 4, got {self.chunk_size}")
        if self.steps < 1:
            raise ValueError(f"serve.steps must be > 0, got {self.steps}")
        if self.tier != "auto" and self.tier not in ACTION_TIERS:
            raise ValueError(f"serve.tier must be auto or one of {list(ACTION_TIERS)}, got {self.tier!r}")
        for side, v in (("height", self.height), ("width", self.width)):
            if v is not None and (v <= 0 or v % 16):
                raise ValueError(f"serve.{side} must be a positive multiple of 16, got {v}")
        if self.fps is not None and self.fps <= 0:
            raise ValueError(f"serve.fps must be > 0, got {self.fps}")
        return self


class WorldtuneConfig(Section):
    """A whole config file: one section per stage (plus `[model]`, shared by the stages that load it)."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    autoencoder: AutoencoderConfig = Field(default_factory=AutoencoderConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    compare: CompareConfig = Field(default_factory=CompareConfig)
    idm: IdmConfig = Field(default_factory=IdmConfig)
    trajectories: TrajectoriesConfig = Field(default_factory=TrajectoriesConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)


# ------------------------------------------------------------------------------------- machinery
def _check_4k1(v: int) -> int:
    if v < 1 or (v - 1) % 4 != 0:
        lo = max(1, (v - 1) // 4 * 4 + 1)
        raise ValueError(f"num_frames must be of the form 4k+1 (the VAE compresses time 4x), got {v}; try {lo} or {lo + 4}")
    return v


def _parse_value(text: str) -> Any:
    """A command-line value: TOML/JSON literal if it parses (numbers, bools, lists), else a string."""
    for parse in (lambda s: tomllib.loads(f"v = {s}")["v"], json.loads):
        try:
            return parse(text)
        except Exception:
            pass
    if text.lower() in ("none", "null"):
        return None
    return text


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`--a.b 1 --c=x` -> {"a": {"b": 1}, "c": "x"}."""
    tree: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}': overrides look like --section.key value")
        key = arg[2:]
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"override '{arg}' has no value")
            raw = args[i + 1]
            i += 2
        node = tree
        parts = key.replace("-", "_").split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        value = _parse_value(raw)
        node[parts[-1]] = _Whole(value) if isinstance(value, dict) else value
    return tree


class _Whole(dict):
    """A table given whole on the command line (`--prepare.cameras '{video="video"}'`): it replaces the
    file's table instead of merging into it, or a 4-camera recipe would keep its other 3 cameras."""


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and not isinstance(v, _Whole) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)  # a dotted key: into the table
        else:
            out[k] = dict(v) if isinstance(v, dict) else v
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> WorldtuneConfig:
    """Read a TOML config (or none), apply dotted overrides, validate.

    An error names where the offending value came from (the file, the command line, or the
    defaults) and its dotted key; an unknown key gets the closest known one as a suggestion.
    """
    data: dict[str, Any] = {}
    where = "defaults"
    if path is not None:
        p = Path(path)
        where = str(p)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist: pass a TOML file (see configs/)")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: not valid TOML ({e})") from None
    tree = parse_overrides(overrides) if overrides else {}
    from_file = data
    data = _merge(data, tree)
    try:
        return WorldtuneConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        cli = _has_path(tree, loc) and (len(loc) > 1 or not _has_path(from_file, loc))
        origin = "command line" if cli else where
        key = ".".join(loc)
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"{origin}: unknown key {key}{_suggestion(loc)}") from None
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{origin}: {key}: {msg}" if key else f"{origin}: {msg}") from None


def _has_path(tree: dict[str, Any], loc: list[str]) -> bool:
    node: Any = tree
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _suggestion(loc: list[str]) -> str:
    """"; did you mean `train.steps`?" for a mistyped key, from the fields of the section it was given in."""
    import difflib

    model: type[BaseModel] = WorldtuneConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        sub = field.annotation if field else None
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            return ""
        model = sub
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    if close:
        return f"; did you mean `{'.'.join([*loc[:-1], close[0]])}`?"
    return "; `--print-config` shows every key"


# ------------------------------------------------------------------------------ describing and dumping
def describe_fields(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, description) of every field of a section, nested sections expanded.

    The source of `--help`'s key listing: generic over sections, so a new section or field shows
    up without touching the CLI.
    """
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}"
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            rows += describe_fields(sub, key)
            continue
        if field.is_required():
            default = "(required)"
        else:
            value = field.get_default(call_default_factory=True)
            default = "none" if value is None else f"{value:.4g}" if isinstance(value, float) and len(repr(value)) > 8 \
                else _inline(_jsonable(value))
        rows.append((key, _type_name(sub), default, field.description or ""))
    return rows


def _type_name(annotation: Any) -> str:
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if annotation is type(None):
        return "none"
    if args:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is Ellipsis:
        return "..."
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def dump_config(cfg: BaseModel, sections: list[str] | None = None) -> str:
    """The resolved config as TOML with `[section]` headers (what `--print-config` shows and run folders store).

    Every key is listed; an unset (None) key appears as a comment, since TOML has no null. The text
    loads back with `load_config` to the same config. A whole `WorldtuneConfig` is dumped section by
    section (`sections` picks some); any other model is dumped under its own name's section.
    """
    lines: list[str] = []
    if isinstance(cfg, WorldtuneConfig):
        for name in sections or list(WorldtuneConfig.model_fields):
            _table(lines, name, getattr(cfg, name))
    else:
        owner = next((n for n, f in WorldtuneConfig.model_fields.items() if f.annotation is type(cfg)), None)
        if owner is None:
            raise ValueError(f"{type(cfg).__name__} is not a section of WorldtuneConfig")
        _table(lines, owner, cfg)
    return "\n".join(lines).strip() + "\n"


def _table(lines: list[str], path: str, model: BaseModel) -> None:
    if lines:
        lines.append("")
    lines.append(f"[{path}]")
    nested = []
    data = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            nested.append((name, value))
        elif data[name] is None and field.get_default(call_default_factory=True) is not None:
            lines.append(f'{_key(name)} = "none"')  # None chosen over a default: say so explicitly
        elif data[name] is None:
            lines.append(f"# {name} = (unset; {_type_name(field.annotation)})")
        else:
            lines.append(f"{_key(name)} = {_inline(data[name])}")
    for name, value in nested:
        _table(lines, f"{path}.{name}", value)


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)


def _key(k: Any) -> str:
    k = str(k)
    return k if k and all(c.isalnum() or c in "-_" for c in k) else json.dumps(k)


def _inline(value: Any) -> str:
    """A TOML value on one line (inline tables for dicts; None entries dropped: TOML has no null)."""
    import tomli_w

    if isinstance(value, dict):
        items = [f"{_key(k)} = {_inline(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value if v is not None) + "]"
    return tomli_w.dumps({"v": value})[4:].strip()
