"""`[serve]`: an action-conditioned world model served to policies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from worldtune.config.section import FP8_DESCRIPTION, Section
from worldtune.config.step_cache import StepCacheConfig
from worldtune.config.train import ACTION_TIERS


class ServeJudgeConfig(Section):
    """`[serve.judge]`: score every recorded rollout with the VLM judge (eval/judge.py) when it ends.

    Separate from `[evaluate]`'s judge_* keys because a server asks one rollout at a time while a policy
    waits for its `end` answer: the defaults fail fast (short timeout, one retry, a breaker that retries
    after a minute) where an offline evaluation can afford to wait."""

    kind: Literal["vlm", "scene"] = Field("vlm", description="vlm: the chat-completions judge at `endpoint`; scene: "
                                          "worldtune's success detector for the synthetic scene (blocks and bowl read "
                                          "from the pixels, no model weights), with the cameras of `cameras`")
    endpoint: str | None = Field(None, description="OpenAI-compatible chat-completions URL of the judge (a vLLM "
                                 "server of Cosmos-Reason2: http://localhost:8000/v1); None = rollouts are not judged")
    cameras: str | None = Field(None, description="kind = scene: the scene dataset's meta/cameras.json (its fixed "
                                "exterior cameras, where the detector triangulates the blocks)")
    last_frames: int = Field(3, description="kind = scene: the final frames judged; done when done in most of them")
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

    @property
    def enabled(self) -> bool:
        """Whether rollouts are judged: an endpoint for the VLM judge, or the scene detector."""
        return self.kind == "scene" or bool(self.endpoint)

    @model_validator(mode="after")
    def _check(self) -> "ServeJudgeConfig":
        if self.kind == "scene" and not self.cameras:
            raise ValueError("serve.judge.kind = \"scene\" needs serve.judge.cameras: the scene dataset's "
                             "meta/cameras.json")
        if self.last_frames < 1:
            raise ValueError(f"serve.judge.last_frames must be >= 1, got {self.last_frames}")
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
    max_rollouts: int = Field(8, description="rollouts open at once (each client's reset opens one); a reset beyond "
                              "gets status 503. Each holds its frames in memory until it ends")
    idle_timeout: float = Field(600.0, description="seconds without a step after which the server ends (and records) "
                                "a rollout")
    request_timeout: float = Field(60.0, description="seconds a client has to send a whole request; a stalled or "
                                   "idle connection is closed after this long")
    sampler: Literal["worldtune", "pipeline"] = Field(
        "worldtune", description="worldtune: the pipeline's forward-dynamics loop on fixed-shape buffers, the steps of "
        "clients that step together generated in one transformer call (each client gets what a lone call gives); "
        "pipeline: the plain pipeline call, one chunk at a time")
    cuda_graphs: bool | None = Field(None, description="worldtune sampler: capture each transformer call shape as a "
                                     "CUDA graph on its first chunk and replay it after; None = on CUDA unless "
                                     "serve.cache is on (a cache decides on the host, which a graph cannot replay)")
    compile: bool = Field(False, description="worldtune sampler: torch.compile the transformer's decoder layers (the "
                          "first chunk of each shape compiles first)")
    fp8: bool = Field(False, description=FP8_DESCRIPTION + "; slower than bf16 on a forward-dynamics chunk on one "
                      "H100 (3.7 vs 2.6 s at guidance 6: too few tokens a call for float8 to pay)")
    max_batch: int = Field(8, description="worldtune sampler: the most steps (of different rollouts) generated in "
                           "one batch")
    batch_window: float = Field(0.005, description="seconds a step waits for other clients' steps to join its batch "
                                "(0 = only steps already waiting join)")
    cache: StepCacheConfig = Field(default_factory=StepCacheConfig, description="a step cache on the transformer's "
                                   "blocks for every chunk (kind = first_block or taylorseer): a labelled speed "
                                   "option, frames differ; not with serve.cuda_graphs = true")
    judge: ServeJudgeConfig = Field(default_factory=ServeJudgeConfig, description="score each recorded rollout "
                                    "with a VLM judge (success, progress) when serve.judge.endpoint is set")

    @model_validator(mode="after")
    def _check(self) -> "ServeConfig":
        if self.judge.enabled and self.record is None:
            raise ValueError("serve.judge is on (an endpoint, or kind = scene) but serve.record is none: the judge "
                             "scores the recorded episode, so set serve.record to a folder (or turn the judge off)")
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
        if self.sampler == "pipeline" and (self.cuda_graphs or self.compile):
            raise ValueError("serve.cuda_graphs and serve.compile apply to serve.sampler = \"worldtune\": set that "
                             "sampler or turn them off")
        if self.cuda_graphs and self.cache.kind != "none":
            raise ValueError("serve.cache decides per step on the host, which a CUDA graph cannot replay: set "
                             "serve.cuda_graphs = false (or serve.cache.kind = \"none\")")
        if self.batch_window < 0:
            raise ValueError(f"serve.batch_window must be >= 0 seconds, got {self.batch_window}")
        for name in ("max_rollouts", "idle_timeout", "request_timeout", "max_batch"):
            if getattr(self, name) <= 0:
                raise ValueError(f"serve.{name} must be > 0, got {getattr(self, name)}")
        return self
