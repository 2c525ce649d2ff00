"""`[idm]`, `[trajectories]`: the inverse-dynamics labeller and the LeRobot datasets it writes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from worldtune.config.section import Section
from worldtune.config.train import ACTION_TIERS, CheckpointConfig


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
