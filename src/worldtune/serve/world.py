"""`WorldModel`: a Cosmos 3 forward-dynamics model kept loaded, rolled out chunk by chunk for a policy.

A rollout is `reset(first frame of every camera, instruction, seed)`, then `step(action chunk)` as often as
the policy likes, each step generating the K frames the chunk produces from the last frame generated so far
(autoregressive over chunks), then `end()` (or the next `reset`), which records the rollout and, with
`[serve.judge]`, has the judge score the recording (`serve/judging.py`). Chunk c of a rollout reset with
seed s draws its noise from seed s + c, so a rollout is reproduced exactly by the same first frames,
instruction, seed and actions.

What the model is told comes from, in order: the forward-dynamics adapter (its action domain and action
normalisation), the prepared dataset (`serve.dataset`: camera layout, frame size, fps, and its actions.json),
then the `serve` settings. How cameras map to model frames is in `serve/cameras.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.config import ServeConfig, WorldtuneConfig
from worldtune.data.layout import Layout, SingleLayout, layout_from_dict
from worldtune.errors import ConfigError, DatasetError, ServeError
from worldtune.infer.dynamics import check_actions, forward_dynamics
from worldtune.models.action_dynamics import ActionDomain
from worldtune.models.family import action_dynamics, family_of, pipeline_dynamics
from worldtune.serve.cameras import CameraMap, check_stream_size, returned_size
from worldtune.serve.judging import RolloutJudge, rollout_judge
from worldtune.serve.protocol import Ended, check_policy
from worldtune.serve.recorder import EpisodeRecorder

DEFAULT_FPS = 15.0  # DROID's rate, NVIDIA's forward-dynamics recipe
SINGLE_ROLE = "image"  # the camera's name when no layout is given


@dataclass
class ActionSpace:
    """The actions a policy sends: the model's domain, their names, and how to scale them for the model."""

    domain: ActionDomain
    names: list[str]
    normalization: str = "none"  # data/actions.py: none, quantile, meanstd, minmax
    stats: dict[str, Any] | None = None  # actions.json "stats"/"action"

    def to_model(self, actions: np.ndarray) -> np.ndarray:
        from worldtune.data.actions import normalize

        if self.normalization == "none" or self.stats is None:
            return actions
        return np.asarray(normalize(actions.astype(np.float64), self.stats, self.normalization), np.float32)


@dataclass
class Rollout:
    """The running rollout: the last frame of every model stream and where the seed is."""

    instruction: str
    seed: int
    streams: list[np.ndarray]
    chunks: int = 0
    policy: str | None = None  # the label the policy gave at reset, written with the recording and its verdict


class WorldModel:
    """One loaded model, one rollout at a time (callers serialise access)."""

    def __init__(self, pipe, actions: ActionSpace, layout: Layout, size: tuple[int, int] | None, fps: float,
                 sc: ServeConfig, keys: dict[str, str], model_label: str, record: str | None = None,
                 tier: int | None = None, view_point: str | None = None, judge: RolloutJudge | None = None) -> None:
        self.pipe, self.actions, self.layout, self.fps, self.sc = pipe, actions, layout, fps, sc
        self.judge = judge  # scores each recorded rollout at its end; None: no judging
        self.keys = keys  # role -> camera key in the recorded episodes
        self.model_label, self.record = model_label, record
        self.tier = tier  # None: chosen from the frame size (the smallest tier whose canvas holds it)
        self.view_point = view_point or ("concat_view" if layout.kind == "grid" else "ego_view")
        self.cameras: CameraMap | None = None
        self.recorder: EpisodeRecorder | None = None
        if size is not None:
            self._fix_size(*size)
        self.rollout: Rollout | None = None

    # ------------------------------------------------------------------ facts
    def info(self) -> dict[str, Any]:
        from worldtune.serve.protocol import VERSION

        sizes = self.cameras.camera_sizes() if self.cameras else None
        return {"protocol": VERSION, "model": self.model_label, "domain": self.actions.domain.to_dict(),
                "action_width": self.actions.domain.width, "action_names": self.actions.names,
                "actions": self.sc.actions, "normalization": self.actions.normalization,
                "chunk_size": self.sc.chunk_size, "cameras": list(self.layout.roles), "camera_keys": self.keys,
                "camera_sizes": {r: list(s) for r, s in sizes.items()} if sizes else None,
                "layout": self.layout.to_dict(), "fps": self.fps, "steps": self.sc.steps,
                "guidance": self.sc.guidance, "tier": self.tier, "view_point": self.view_point,
                "record": self.record, "episode_active": self.rollout is not None,
                "judge": self.judge.info() if self.judge is not None else None}

    # ------------------------------------------------------------------ rollout
    def reset(self, frames: dict[str, np.ndarray], instruction: str, seed: int,
              policy: str | None = None) -> dict[str, np.ndarray]:
        """Start a rollout (recording the running one first); returns every camera's first frame as the model
        sees it, {role: [h, w, 3]}. `policy` labels the rollout's recording (`serve/ranking.py` groups by it).
        Every argument is checked before the running rollout is ended, so a refused reset leaves it running."""
        frames = self._by_role(frames)
        policy = check_policy(policy)
        if not isinstance(instruction, str) or not instruction.strip():
            raise ServeError("reset: give the task instruction as a non-empty string")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ServeError(f"reset: seed {seed!r} is not a non-negative integer")
        if self.cameras is None:  # no configured size: the first camera's frame, fitted to the tier
            h, w = next(iter(frames.values())).shape[:2]
            self._fix_size(*returned_size(h, w, self.tier or _smallest_tier(h, w)))
        assert self.cameras is not None
        streams = self.cameras.to_streams(frames)
        self.end()
        self.rollout = Rollout(instruction, seed, streams, policy=policy)
        first = self.cameras.to_cameras([s[None] for s in streams])
        if self.recorder is not None:
            labels = {"source/policy": policy} if policy is not None else {}  # no column of nulls when unlabelled
            self.recorder.start(first, instruction, {"source/model": self.model_label, "source/seed": seed,
                                                     "source/adapter": self.sc.adapter, **labels})
        return {r: f[0] for r, f in first.items()}

    def step(self, actions: Any) -> dict[str, np.ndarray]:
        """Generate one chunk: {role: [K, h, w, 3]}, the frames after each of the K actions."""
        if self.rollout is None:
            raise ServeError("step before reset: start a rollout with reset(first frames, instruction, seed)")
        try:
            raw = check_actions(actions, self.actions.domain)
        except ConfigError as e:
            raise ServeError(f"step: {e}") from None
        if self.sc.chunk_size is not None and len(raw) != self.sc.chunk_size:
            raise ServeError(f"step: {len(raw)} actions, this server takes chunks of serve.chunk_size = "
                             f"{self.sc.chunk_size}")
        model_actions = self.actions.to_model(raw) if self.sc.actions == "raw" else raw
        if not np.isfinite(model_actions).all():
            raise ServeError("step: the actions are outside what the normalisation can scale (not finite after "
                             "scaling)")
        r = self.rollout
        videos = [forward_dynamics(self.pipe, s, model_actions, self.actions.domain, r.instruction,
                                   seed=r.seed + r.chunks, steps=self.sc.steps, guidance=self.sc.guidance,
                                   tier=self.tier, view_point=self.view_point, fps=self.fps)
                  for s in r.streams]
        r.streams = [v[-1] for v in videos]
        r.chunks += 1
        assert self.cameras is not None
        out = self.cameras.to_cameras([v[1:] for v in videos])
        if self.recorder is not None:
            self.recorder.add(out, raw)
        return out

    def end(self) -> Ended:
        """End the running rollout: record it, then (with a judge) score the recording. `recorded` is None when
        nothing was stepped or nothing is recorded; the judge runs only on a recorded episode, after it is
        written, so its failure cannot cost the recording."""
        if self.rollout is None:
            return Ended()
        ended, self.rollout = self.rollout, None
        if self.recorder is None:
            return Ended()
        recorded = self.recorder.finish()
        written = self.recorder.take_written()  # taken even without a judge, so the frames are let go
        if recorded is None:
            return Ended()
        verdict = self.judge(recorded, ended.instruction, written, ended.policy) if self.judge is not None else None
        return Ended(str(recorded), verdict)

    # ------------------------------------------------------------------ helpers
    def _fix_size(self, height: int, width: int) -> None:
        self.tier = self.tier or _smallest_tier(height, width)
        check_stream_size(height, width, self.tier, "serve")
        self.cameras = CameraMap(self.layout, height, width)
        if self.record is not None:
            self.recorder = EpisodeRecorder(self.record, self.fps, self.keys, self.cameras.camera_sizes(),
                                            self.actions.names, self.sc.lossless)

    def _by_role(self, frames: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Frames keyed by role or by the dataset's camera key -> keyed by role; a lone frame fits one camera."""
        to_role = {k: r for r, k in self.keys.items()}
        out = {to_role.get(k, k): v for k, v in frames.items()}
        if len(self.layout.roles) == 1 and len(out) == 1:
            return {self.layout.roles[0]: next(iter(out.values()))}
        unknown = [k for k in out if k not in self.layout.roles]
        if unknown:
            raise ServeError(f"reset: unknown camera {unknown}; the cameras are {self.layout.roles} "
                             f"(or their keys {list(self.keys.values())})")
        return out


# ---------------------------------------------------------------------------------------- loading
def load_world(cfg: WorldtuneConfig) -> WorldModel:
    """The model, its adapter and every setting, checked before the server opens its port."""
    sc = cfg.serve
    info, index = _dataset_facts(sc.dataset)
    layout = _layout(sc, info)
    size = _size(sc, info, layout)
    keys = {r: str(((info or {}).get("cameras") or {}).get(r) or f"observation.images.{r}") for r in layout.roles}
    pipe, label = _load_pipeline(cfg)
    trained: dict[str, Any] = {}  # what the adapter was trained with (read_action_info)
    if sc.adapter:
        actions, trained = _adapter_actions(pipe, sc.adapter)
    elif index:
        actions = _dataset_actions(index)
    else:
        actions = _named_actions(sc.domain)
    fps = float(sc.fps or trained.get("fps") or (info or {}).get("fps") or DEFAULT_FPS)
    tier = sc.tier if sc.tier != "auto" else trained.get("tier")
    view_point = sc.view_point if sc.view_point != "auto" else trained.get("view_point")
    return WorldModel(pipe, actions, layout, size, fps, sc, keys, label, sc.record, tier, view_point,
                      rollout_judge(sc.judge))


def _smallest_tier(height: int, width: int) -> int:
    """The tier training picks by default (`data/dynamics.choose_tier`): the smallest canvas holding the frames."""
    from worldtune.data.dynamics import choose_tier

    return choose_tier(height, width, "auto", action_dynamics().canvas)


def _dataset_facts(dataset: str | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(info.json, actions.json or None) of a prepared dataset."""
    if dataset is None:
        return None, None
    root = Path(dataset)
    path = root / "info.json"
    if not path.is_file():
        raise DatasetError(f"serve.dataset = {root}: no info.json there; point it at a folder `worldtune prepare` wrote")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: not valid JSON ({e}); rerun prepare") from None
    index = None
    if (root / "actions.json").is_file():
        from worldtune.data.actions import read_index

        index = read_index(root)
    return info, index


def _layout(sc: ServeConfig, info: dict[str, Any] | None) -> Layout:
    d = sc.layout or (info or {}).get("layout")
    return layout_from_dict(d) if d else SingleLayout(role=SINGLE_ROLE)


def _size(sc: ServeConfig, info: dict[str, Any] | None, layout: Layout) -> tuple[int, int] | None:
    """The model stream's size: configured, else the dataset's (its clips are the model's frames)."""
    if (sc.height is None) != (sc.width is None):
        raise ConfigError("serve.height and serve.width go together: set both or neither")
    if sc.height is not None:
        return sc.height, int(sc.width)  # type: ignore[arg-type]
    h = layout.height or (info or {}).get("height")
    w = layout.width or (info or {}).get("width")
    return (int(h), int(w)) if h and w else None


def _load_pipeline(cfg: WorldtuneConfig):
    from worldtune.models.load import load_pipeline

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu") if cfg.serve.device == "auto" \
        else torch.device(cfg.serve.device)
    dtype = cfg.model.dtype if device.type == "cuda" else "fp32"
    pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype=dtype, device="cpu", seed=cfg.model.seed,
                               vae_dtype=dtype, revision=cfg.model.revision, random_weights=cfg.model.random_weights)
    if not family_of(spec).has_action_heads(pipe.transformer):  # only Cosmos 3 transformers have action heads
        raise ConfigError(f"model {spec.name} has no Cosmos 3 action heads: `worldtune serve` needs a Cosmos 3 model "
                          "with action_gen (cosmos3-edge, cosmos3-nano, tiny-cosmos3)")
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe, spec.name


def _named_actions(name: str) -> ActionSpace:
    """An existing domain by name, actions taken as they come (existing domains train unnormalised)."""
    dyn = action_dynamics()
    if name not in dyn.raw_widths:
        raise ConfigError(f"serve.domain = {name!r} is not a Cosmos 3 action domain with a fixed width: choose one "
                          f"of {sorted(dyn.raw_widths)}, or give serve.adapter / serve.dataset")
    domain = dyn.resolve_domain(name, None, dyn.raw_widths[name], "", "serve.domain")
    return ActionSpace(domain, [f"action_{i}" for i in range(domain.width)])


def _dataset_actions(index: dict[str, Any]) -> ActionSpace:
    d = index["domain"]
    domain = ActionDomain(str(d["name"]), int(d["id"]), int(d["width"]), bool(d["new"]))
    return ActionSpace(domain, list(index.get("names") or [f"action_{i}" for i in range(domain.width)]),
                       str(index.get("normalization") or "none"), (index.get("stats") or {}).get("action"))


def _adapter_actions(pipe, adapter: str) -> tuple[ActionSpace, dict[str, Any]]:
    """Load a forward-dynamics adapter (LoRA + the domain's action rows) into the model; its action space and
    the facts it was trained with (fps, tier, view point, chunk)."""
    from worldtune.infer.adapters import activate, check_adapter, load_adapters

    dyn = pipeline_dynamics(pipe)
    info = dyn.read_adapter_info(adapter)
    dyn.require_mode(info, "forward_dynamics", adapter)
    lora = check_adapter(adapter, pipe.transformer, "fd")
    load_adapters(pipe.transformer, [lora])
    activate(pipe.transformer, lora, True)
    domain = dyn.load_adapter_rows(pipe.transformer, adapter)
    names = list(info.get("names") or [f"action_{i}" for i in range(domain.width)])
    return ActionSpace(domain, names, str(info.get("normalization") or "none"), info.get("stats")), info
