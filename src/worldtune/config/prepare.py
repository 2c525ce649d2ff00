"""`[prepare]`: LeRobot episodes (or videos) to a prepared clip dataset, with actions beside the clips."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from worldtune.config.section import Section, _check_4k1
from worldtune.data.frame_size import nearest_multiples


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
