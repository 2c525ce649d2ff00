"""`[evaluate]`, `[report]`, `[compare]`: scoring generations and reporting them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from worldtune.config.generate import AdapterSpec
from worldtune.config.section import Section
from worldtune.config.train import ACTION_TIERS


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
    labellers: list[Literal["idm", "cosmos3"]] = Field(
        default_factory=list, description="label every generated video back and compare with the actions that drove "
        "it (closed-loop action consistency, docs/eval.md): idm = the IDM of evaluate.actions.idm; cosmos3 = the "
        "[model]'s own inverse dynamics (trajectories.cosmos3's settings); [] = off")
    idm: str | None = Field(None, description="the `worldtune idm` run folder of the idm labeller")
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
    metrics: list[str] = Field(default_factory=lambda: ["sampson_temporal", "sampson_crossview", "sampson_crossview_dynamic",
                                                        "pixels", "ee_track_error"],
                               description="sampson_temporal, sampson_crossview, sampson_crossview_dynamic (cross-view "
                                           "on what moves), pixels (= psnr, ssim, dynamic_psnr, "
                                           "motion_iou_spatial, motion_iou_spatiotemporal, warp_error), "
                                           "ee_track_error (the gripper's track in the exterior views against "
                                           "its true path; synthetic-scene datasets only, else absent with the "
                                           "reason), judge_physics, judge_instruction, judge:<rubric>")
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
    sampson_detect_scale: Literal["auto"] | float = Field(
        "auto", description="cross-view SIFT on frames scaled by this (0.5 = half size, 4x faster); auto: measured "
                            "per input on the real clip (half size only when it keeps >= 80 % of the matches)")
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
