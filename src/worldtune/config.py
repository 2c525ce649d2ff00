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
    """Which model: a registry name (random init) or a local diffusers directory (real weights)."""

    name: str | None = None  # registry name; None = taken from `path`, or tiny-predict2.5 without one
    path: str | None = None  # local diffusers-format pipeline directory (real weights)
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    seed: int = 0  # for random initialisation from a spec


# --------------------------------------------------------------------------------------- prepare
class GridConfig(Section):
    """A rows x cols tiling; `cells` maps camera role -> [row, col]. Unmapped cells are black."""

    rows: int = 2
    cols: int = 2
    cells: dict[str, tuple[int, int]] = Field(
        default_factory=lambda: {"exterior_1": (0, 0), "exterior_2": (0, 1), "wrist": (1, 0)}
    )


class PrepareConfig(Section):
    """`worldtune prepare`: a LeRobot (v2.x, v3) or plain video dataset into training clips."""

    source: str = "demo_out/lerobot"  # dataset root
    out: str = "demo_out/dataset"  # prepared dataset folder
    # camera role -> dataset feature key (LeRobot) ; roles are what layouts refer to
    cameras: dict[str, str] = Field(
        default_factory=lambda: {
            "exterior_1": "observation.images.exterior_1_left",
            "exterior_2": "observation.images.exterior_2_left",
            "wrist": "observation.images.wrist_left",
        }
    )
    layout: Literal["grid", "separate", "single"] = "grid"
    grid: GridConfig = Field(default_factory=GridConfig)
    num_frames: int = 17
    stride: int = 1
    clip_policy: Literal["episode", "sliding"] = "episode"
    overlap: int = 0  # frames shared by consecutive sliding windows
    height: int = 64
    width: int = 112
    fps: float | None = None  # output fps; None = source fps / stride
    resize: Literal["pad", "crop"] = "pad"  # aspect kept: pad with black, or center crop
    prompt_template: str = "droid_grid"  # preset name (droid_grid, gr1, plain) or a string with {task}
    missing_task: Literal["skip", "fallback"] = "fallback"
    fallback_task: str = "performs a task."
    only_successful: bool = False
    max_episodes: int | None = None
    val_fraction: float = 0.1  # episodes held out (split="val") for validation and generation
    seed: int = 0  # which episodes are held out
    workers: int = 2
    codec: str = "libx264"
    crf: int = 18
    preset: str = "medium"  # x264 preset of the written clips

    @field_validator("num_frames")
    @classmethod
    def _frames_4k1(cls, v: int) -> int:
        return _check_4k1(v)


# ----------------------------------------------------------------------------------------- cache
class CacheConfig(Section):
    """`worldtune cache`: VAE latents per clip and text embeddings per unique prompt."""

    dataset: str = "demo_out/dataset"
    out: str | None = None  # default: <dataset>/cache/<model-key>
    batch_size: int = 4
    # what text embedding to store: "raw" (encoder output; Predict2.5: 512 x 100352 = 103 MB each),
    # "projected" (Predict2.5's crossattn_proj output, 1 MB; adapters only, since full fine-tuning
    # trains that projection), "auto" = projected for Predict2.5, raw for Predict2
    text: Literal["auto", "raw", "projected"] = "auto"
    dtype: Literal["bf16", "fp32"] = "bf16"  # storage dtype of latents and embeddings
    device: str = "auto"  # auto = cuda if available


# ----------------------------------------------------------------------------------------- train
class LoraConfig(Section):
    rank: int = 32
    alpha: float | None = None  # None = rank (alpha/rank = 1, as NVIDIA and the diffusers example)
    dropout: float = 0.0
    targets: list[str] = Field(
        default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]
    )
    init: Literal["default", "gaussian"] = "default"

    @field_validator("rank")
    @classmethod
    def _rank_positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError(f"lora rank must be > 0, got {v}")
        return v


class CheckpointConfig(Section):
    every: int = 100  # optimizer steps between checkpoints (0 = only at the end)
    keep: int = 3  # keep the newest K complete checkpoints
    milestones: list[int] = Field(default_factory=list)  # steps never deleted


class TrainConfig(Section):
    """`worldtune train`: rectified-flow post-training (LoRA, DoRA or full) of the DiT."""

    dataset: str = "demo_out/dataset"
    cache: str | None = "auto"  # "auto" = use <dataset>/cache/<model-key> if it exists; None = decode clips
    out: str = "demo_out/runs/lora"
    mode: Literal["lora", "dora", "full"] = "lora"
    lora: LoraConfig = Field(default_factory=LoraConfig)
    ema: float | None = None  # EMA decay for full fine-tuning
    steps: int = 200  # optimizer steps
    batch_size: int = 1  # per process
    grad_accum: int = 1
    lr: float = 2**-14.5
    weight_decay: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    warmup: int = 1000
    f_max: float = 0.5  # NVIDIA recipe: lr multiplier decays linearly from f_max to f_min after warmup
    f_min: float = 0.2
    grad_clip: float = 1.0
    # rectified flow (shared/DESIGN.md §4)
    logit_mean: float = 0.0
    logit_std: float = 1.0
    shift: float = 5.0
    cond_frames_probs: dict[int, float] = Field(default_factory=lambda: {0: 0.5, 1: 0.25, 2: 0.25})
    cond_timestep: float = 1e-4
    text_dropout: float = 0.2
    # memory / speed
    mixed_precision: Literal["bf16", "fp16", "no"] = "bf16"
    # off | all | selective | every:N | blocks:N | auto. auto on CUDA = selective (recompute all but
    # attention: fastest measured on an H200, docs/benchmarks.md); on CPU = off
    grad_checkpointing: str = "auto"
    memory_auto: bool = False  # with auto: keep as many whole blocks as free memory allows instead
    compile: bool | None = None  # regional torch.compile of each block; None = on CUDA (measured fastest), off on CPU
    fused_adaln: bool = True  # adaLN modulation per frame instead of per token (same numbers, less work)
    fused_adamw: bool = True  # on CUDA
    attention_backend: str | None = None  # pin SDPA to cudnn, flash, efficient or math; None = PyTorch's choice
    view_attention: Literal["joint", "per_view"] = "joint"  # multi-view model (datasets with separate views)
    fsdp: bool = False  # shard parameters, gradients and optimizer states (FSDP2) across processes
    cpu_offload: bool = False  # FSDP2 CPU offload of parameters and optimizer states
    num_frames: int | None = None  # None = the dataset's
    # run control
    seed: int = 42
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    resume: str | None = None  # None, "auto", or a checkpoint directory
    log_every: int = 10
    val_every: int = 0  # 0 = only at the end
    val_samples: int = 2
    val_videos: int = 1  # held-out clips generated at each validation (fixed noise); 0 = none
    val_steps: int = 8  # sampler steps for validation videos
    val_guidance: float = 7.0
    val_sigmas: list[float] = Field(default_factory=lambda: [0.1, 0.3, 0.6, 0.9])
    tensorboard: bool = True
    wandb: bool = False
    workers: int = 0

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
        if self.fsdp and self.mode != "full":
            raise ValueError("train.fsdp shards full fine-tuning; adapters (lora/dora) are small: train them with "
                             "plain data parallelism (train.fsdp = false)")
        if self.fsdp and self.ema:
            raise ValueError("train.ema is not supported together with train.fsdp yet; use one of them")
        if self.steps <= 0 or self.batch_size <= 0 or self.grad_accum <= 0:
            raise ValueError("train.steps, train.batch_size and train.grad_accum must be > 0")
        return self


# -------------------------------------------------------------------------------------- generate
class AdapterSpec(Section):
    path: str
    scale: float = 1.0
    name: str | None = None


class GenerateConfig(Section):
    """`worldtune generate`: videos from (first frame, prompt) pairs, several seeds and adapters."""

    inputs: str = "demo_out/dataset"  # folder of NAME.png+NAME.txt, a .jsonl, or a prepared dataset
    split: Literal["all", "val"] = "val"  # for a prepared dataset: held-out clips only
    out: str = "demo_out/generations"
    adapters: list[AdapterSpec] = Field(default_factory=list)
    include_base: bool = True
    fuse: bool = False
    transformer: str | None = None  # a full fine-tuned transformer folder
    mode: Literal["image2world", "video2world", "text2world"] = "image2world"
    cond_latent_frames: int = 1  # video2world: 1 or 2
    seeds: list[int] = Field(default_factory=lambda: [0, 1])
    steps: int = 36
    guidance: float = 7.0
    negative_prompt: str | None = None
    height: int | None = None
    width: int | None = None
    num_frames: int | None = None
    max_inputs: int | None = None
    resize: Literal["pad", "crop"] = "pad"
    split_views: bool = True
    # speed (none of these changes the output beyond bf16 rounding; docs/benchmarks.md has the numbers)
    sampler: Literal["worldtune", "pipeline"] = "worldtune"  # worldtune: the pipeline's algorithm, leaner (2.5 only)
    batch_guidance: bool = True  # both guidance branches in one batch-2 DiT call (worldtune sampler)
    compile: bool | None = None  # regional torch.compile of each block; None = on CUDA, off on CPU
    fused_adaln: bool = True  # adaLN modulation per frame instead of per token (worldtune sampler)
    fps: float | None = None  # fps of the written mp4s; None = the model's
    layout: dict[str, Any] | None = None  # camera layout (as in a dataset's info.json) for folder/JSONL inputs
    attention_backend: str | None = None  # pin SDPA to cudnn, flash, efficient or math; None = PyTorch's choice
    device: str = "auto"  # auto = cuda:<LOCAL_RANK> when CUDA is available, else cpu
    cond_timestep: float = 1e-4  # timestep of the clean conditioning latent frames (2.5 family)
    max_sequence_length: int | None = None  # text tokens (padded/truncated); None = the model spec's

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
        return self


# -------------------------------------------------------------------------------------- evaluate
class EvaluateConfig(Section):
    runs: list[str] = Field(default_factory=lambda: ["demo_out/generations"])
    out: str = "demo_out/eval"
    metrics: list[str] = Field(default_factory=lambda: ["sampson_temporal", "sampson_crossview"])
    judge_endpoint: str | None = None
    judge_model: str = "nvidia/Cosmos-Reason2-2B"
    judge_rubrics: list[str] = Field(default_factory=lambda: ["physical_plausibility", "instruction_following"])
    judge_fps: float = 16.0
    judge_concurrency: int = 4
    workers: int = 2
    frame_gap: int = 1
    min_inliers: int = 15
    # judge request details (docs/eval.md)
    judge_input: Literal["video", "images"] = "video"  # one mp4 video part, or JPEG image parts
    judge_max_images: int = 32  # images mode: frames sent at most
    judge_timeout: float = 300.0  # seconds per request
    judge_retries: int = 4  # extra attempts on 5xx/429/timeouts, exponential backoff
    judge_max_tokens: int = 512
    judge_api_key_env: str | None = None  # name of an environment variable holding a bearer token
    judge_extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into each request
    # Sampson details
    sampson_matcher: Literal["sift", "orb"] = "sift"
    sampson_max_features: int = 2000
    sampson_frame_step: int = 1  # evaluate every k-th frame (pair)
    sampson_min_motion: float = 0.5  # temporal pairs whose matches move less (median, px) are static: skipped
    sampson_moving_views: list[str] = Field(default_factory=lambda: ["wrist"])  # substring of a role: F per frame
    max_videos: int | None = None  # evaluate only the first N rows of each folder (quick looks)


class ReportConfig(Section):
    eval: str = "demo_out/eval"
    runs: list[str] = Field(default_factory=list)  # training run folders for loss curves
    out: str = "demo_out/report"
    title: str = "worldtune report"
    video_format: Literal["auto", "mp4", "webm"] = "auto"  # auto: copy H.264/VP9 as is, re-encode others to WebM
    max_examples: int = 12  # example rows (inputs) shown with videos


class CompareConfig(Section):
    """`worldtune compare`: the grid and separate camera views trained, generated and scored side by side."""

    out: str = "demo_out/compare"
    view_height: int | None = None  # per-view size of the separate branch; None = about the grid's tokens
    view_width: int | None = None

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


class TrajectoriesConfig(Section):
    """`worldtune trajectories`: generated videos + an IDM -> a LeRobot v3.0 dataset with actions."""

    generations: str = Field("demo_out/generations", description="a folder written by `worldtune generate`")
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


class WorldtuneConfig(Section):
    """A whole config file."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    compare: CompareConfig = Field(default_factory=CompareConfig)
    idm: IdmConfig = Field(default_factory=IdmConfig)
    trajectories: TrajectoriesConfig = Field(default_factory=TrajectoriesConfig)


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
        node[parts[-1]] = _parse_value(raw)
    return tree


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> WorldtuneConfig:
    """Read a TOML config (or none), apply dotted overrides, validate. Errors name the file and key."""
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
    if overrides:
        data = _merge(data, parse_overrides(overrides))
    try:
        return WorldtuneConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{where}: {loc}: {err['msg']}") from None


def dump_config(cfg: BaseModel) -> str:
    """The resolved config as TOML (what `--print-config` shows and run folders store)."""
    return _to_toml(cfg.model_dump(mode="json", exclude_none=True))


def _to_toml(data: dict[str, Any], prefix: str = "") -> str:
    import tomli_w

    return tomli_w.dumps(_stringify_keys(data))


def _stringify_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _stringify_keys(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_stringify_keys(v) for v in obj]
    return obj
