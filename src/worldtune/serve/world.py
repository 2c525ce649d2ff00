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
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.config import ServeConfig, WorldtuneConfig
from worldtune.data.layout import Layout, SingleLayout, layout_from_dict
from worldtune.errors import ConfigError, DatasetError, ServeError, WorldtuneError
from worldtune.infer.dynamics import check_actions
from worldtune.models.action_dynamics import ActionDomain, ChunkRequest, ChunkSampler
from worldtune.models.family import action_dynamics, family_of, pipeline_dynamics
from worldtune.names import safe_names, shown
from worldtune.serve.cameras import CameraMap, check_stream_size, returned_size
from worldtune.serve.judging import RolloutJudge, rollout_judge
from worldtune.serve.protocol import Ended, Refused, check_policy, check_seed
from worldtune.serve.recorder import EpisodeRecorder, Recording
from worldtune.serve.scene_judge import SceneJudge, scene_judge

DEFAULT_FPS = 15.0  # DROID's rate, NVIDIA's forward-dynamics recipe
SINGLE_ROLE = "image"  # the camera's name when no layout is given
MAX_SCALE = 4  # a camera frame may be this many times the model frame's side (beyond that it is only shrunk)
UNSIZED_SIDE = 4096  # the longest camera frame side before the model frame's size is known
REQUEST_SLACK = 1 << 20  # bytes of a request besides its frames: JSON, instruction, an action chunk as text
ENDED_MEMORY = 1024  # ended rollouts remembered, so a late step says "ended" and a repeated end gets its answer


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
    """One running rollout: the last frame of every model stream, where the seed is, and its recording."""

    instruction: str
    seed: int
    streams: list[np.ndarray]
    chunks: int = 0
    policy: str | None = None  # the label the policy gave at reset, written with the recording and its verdict
    recording: Recording | None = None  # None: the server does not record
    used: float = field(default_factory=time.monotonic)  # the last reset or step, for serve.idle_timeout
    unwritten: str | None = None  # why its recording failed (it stays, to be written by the next `end`)


class WorldModel:
    """One loaded model and the rollouts of every client, each under the id its `reset` returned (callers
    serialise access: the model runs one sampler call at a time; `step_many` puts several rollouts' steps in one)."""

    def __init__(self, pipe, actions: ActionSpace, layout: Layout, size: tuple[int, int] | None, fps: float,
                 sc: ServeConfig, keys: dict[str, str], model_label: str, record: str | None = None,
                 tier: int | None = None, view_point: str | None = None, judge: RolloutJudge | SceneJudge | None = None,
                 sampler: ChunkSampler | None = None) -> None:
        self.pipe, self.actions, self.layout, self.fps, self.sc = pipe, actions, layout, fps, sc
        # generates the chunks (models/action_dynamics.py); None: the plain pipeline call, one chunk at a time
        self.sampler = sampler or ChunkSampler(pipeline_dynamics(pipe), pipe)
        self.judge = judge  # scores each recorded rollout at its end; None: no judging
        self.keys = safe_names(keys, "the camera keys")  # role -> camera key in the recorded episodes (a folder name)
        self.model_label, self.record = model_label, record
        self.tier = tier  # None: chosen from the frame size (the smallest tier whose canvas holds it)
        self.view_point = view_point or ("concat_view" if layout.kind == "grid" else "ego_view")
        self.cameras: CameraMap | None = None
        self.recorder: EpisodeRecorder | None = None
        if size is not None:
            self._keep_size(*self._sized(*size))
        self.rollouts: dict[str, Rollout] = {}
        self.ended: OrderedDict[str, tuple[Ended, str]] = OrderedDict()  # rollouts the server ended: (answer, why)

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
                "record": self.record, "rollouts": len(self.rollouts), "max_rollouts": self.sc.max_rollouts,
                "idle_timeout": self.sc.idle_timeout, "max_frame_side": self.max_frame_side,
                "max_request_bytes": self.max_request_bytes,
                "judge": self.judge.info() if self.judge is not None else None}

    @property
    def max_frame_side(self) -> int:
        """The longest side of a camera frame `reset` takes: MAX_SCALE times the model frame's longest side (a
        larger frame would only be shrunk), or UNSIZED_SIDE before the size is known."""
        return _max_side(self.cameras)

    @property
    def max_request_bytes(self) -> int:
        """The largest request body: a `reset` with every camera's largest frame, in base64, plus room for the rest."""
        frame = self.max_frame_side ** 2 * 3
        return len(self.layout.roles) * (frame * 4 // 3 + 4) + REQUEST_SLACK

    # ------------------------------------------------------------------ rollouts
    def reset(self, frames: dict[str, np.ndarray], instruction: str, seed: Any,
              policy: str | None = None) -> tuple[str, dict[str, np.ndarray]]:
        """Start a rollout; (its id, every camera's first frame as the model sees it, {role: [h, w, 3]}). `policy`
        labels the rollout's recording (`serve/ranking.py` groups by it). Every argument is checked first."""
        frames = self._by_role(frames)
        policy = check_policy(policy)
        if not isinstance(instruction, str) or not instruction.strip():
            raise ServeError("reset: give the task instruction as a non-empty string")
        seed = check_seed(seed)
        self._check_frames(frames, self.max_frame_side)
        if len(self.rollouts) >= self.sc.max_rollouts:
            waiting = sum(r.unwritten is not None for r in self.rollouts.values())
            raise Refused(f"reset: {len(self.rollouts)} rollouts are open (serve.max_rollouts = {self.sc.max_rollouts}"
                          + (f", {waiting} waiting to be recorded" if waiting else "") + "): end one, or retry later",
                          503)
        # no configured size: the first camera's frame, fitted to the tier, fixes it, but only once every check of
        # this reset has passed (a refused reset must leave the size to the next client)
        cameras, tier = (self.cameras, self.tier) if self.cameras is not None else self._size_of(frames)
        self._check_frames(frames, _max_side(cameras))
        streams = cameras.to_streams(frames)
        if self.cameras is None:
            self._keep_size(cameras, tier)
        assert self.cameras is not None
        rid = secrets.token_hex(8)
        rollout = self.rollouts[rid] = Rollout(instruction, seed, streams, policy=policy)
        first = self.cameras.to_cameras([s[None] for s in streams])
        if self.recorder is not None:
            labels = {"source/policy": policy} if policy is not None else {}  # no column of nulls when unlabelled
            rollout.recording = self.recorder.start(first, instruction, {
                "source/model": self.model_label, "source/seed": seed, "source/adapter": self.sc.adapter, **labels})
        return rid, {r: f[0] for r, f in first.items()}

    def step(self, rid: str, actions: Any) -> dict[str, np.ndarray]:
        """Generate one chunk of rollout `rid`: {role: [K, h, w, 3]}, the frames after each of the K actions."""
        frames, _ = self._raise(self.step_many([(rid, actions)])[0])
        return frames

    def step_many(self, steps: list[tuple[str, Any]]) -> list[tuple[dict[str, np.ndarray], int] | Exception]:
        """Generate one chunk of each rollout named, in one sampler call where they can share it: per step, (its
        frames {role: [K, h, w, 3]}, the rollout's chunk count) or the error that refused it. Each rollout's chunk is
        what a lone `step` gives (its noise comes from its own seed); a rollout named twice steps twice, in order."""
        results: list[Any] = [None] * len(steps)
        todo = list(range(len(steps)))
        while todo:  # rounds in which every rollout steps once: a second step needs the first's last frame
            seen: set[str] = set()
            now = [i for i in todo if not (steps[i][0] in seen or seen.add(steps[i][0]))]
            todo = [i for i in todo if i not in now]
            checked = []
            for i in now:
                try:
                    checked.append((i, *self._check_step(*steps[i])))
                except WorldtuneError as e:
                    results[i] = e
            requests = [self._request(r, model_actions, s) for _, r, _, model_actions in checked for s in r.streams]
            videos = iter(self.sampler.run(requests) if requests else [])
            for i, r, raw, _ in checked:
                results[i] = (self._advance(r, [next(videos) for _ in r.streams], raw), r.chunks)
        return results

    def _check_step(self, rid: str, actions: Any) -> tuple[Rollout, np.ndarray, np.ndarray]:
        """(the rollout, the raw chunk, the chunk in the model's scaling), or the one-line error refusing the step."""
        r = self._open(rid, "step")
        if r.unwritten is not None:
            raise Refused(f"step: rollout {rid} has ended and waits to be recorded ({r.unwritten}): call end again",
                          409)
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
        return r, raw, model_actions

    def _request(self, r: Rollout, model_actions: np.ndarray, stream: np.ndarray) -> ChunkRequest:
        """The chunk of one model stream of a rollout: chunk c of a rollout reset with seed s has seed s + c."""
        return ChunkRequest(stream, model_actions, self.actions.domain, r.instruction, r.seed + r.chunks,
                            self.sc.steps, self.sc.guidance, self.tier, self.view_point, self.fps)

    def _advance(self, r: Rollout, videos: list[np.ndarray], raw: np.ndarray) -> dict[str, np.ndarray]:
        """Take a generated chunk into the rollout (its last frames start the next chunk, the recording grows)."""
        r.streams = [v[-1] for v in videos]
        r.chunks += 1
        r.used = time.monotonic()
        assert self.cameras is not None
        out = self.cameras.to_cameras([v[1:] for v in videos])
        if r.recording is not None:
            r.recording.add(out, raw)
        return out

    @staticmethod
    def _raise(result: Any) -> Any:
        if isinstance(result, Exception):
            raise result
        return result

    def end(self, rid: str) -> Ended:
        """End rollout `rid`: record it, then (with a judge) score the recording. `recorded` is None when nothing
        was stepped or nothing is recorded; the judge runs only on a recorded episode, after it is written, so its
        failure cannot cost the recording. When the write fails (a full disk), the rollout stays, ended, and the
        next `end` writes it: the one-line error says so (status 507)."""
        if rid in self.ended and rid not in self.rollouts:  # ended by the server (idle), or an end repeated
            return self.ended[rid][0]
        r = self._open(rid, "end")
        if r.recording is None or self.recorder is None:
            ended = Ended(rollout=rid)
        else:
            try:
                written = self.recorder.write(r.recording)
            except WorldtuneError as e:
                r.unwritten = str(e)
                raise Refused(f"end: rollout {rid} is not recorded yet ({e}); it is kept: free space or fix the "
                              "folder, then call end again", 507) from None
            if written is None:
                ended = Ended(rollout=rid)
            else:
                folder, frames = written
                verdict = self.judge(folder, r.instruction, frames, r.policy) if self.judge is not None else None
                ended = Ended(str(folder), verdict, rid)
        del self.rollouts[rid]
        self._remember(rid, ended, "ended")
        return ended

    def end_idle(self, now: float | None = None) -> list[tuple[str, Ended | str]]:
        """End every rollout idle for longer than serve.idle_timeout: [(id, its Ended or why it is not recorded)]."""
        now = time.monotonic() if now is None else now
        idle = [rid for rid, r in self.rollouts.items()
                if r.unwritten is None and now - r.used > self.sc.idle_timeout]
        done = self._end_each(idle)
        for rid, ended in done:
            if isinstance(ended, Ended):
                self._remember(rid, ended, f"ended after {self.sc.idle_timeout:g} s without a step")
        return done

    def end_all(self) -> list[tuple[str, Ended | str]]:
        """End every rollout (the server stops): [(id, its Ended or why it is not recorded)]."""
        return self._end_each(list(self.rollouts))

    # ------------------------------------------------------------------ helpers
    def _end_each(self, rids: list[str]) -> list[tuple[str, Ended | str]]:
        out: list[tuple[str, Ended | str]] = []
        for rid in rids:
            try:
                out.append((rid, self.end(rid)))
            except ServeError as e:
                out.append((rid, str(e)))
        return out

    def _open(self, rid: str, what: str) -> Rollout:
        r = self.rollouts.get(rid)
        if r is not None:
            return r
        if rid in self.ended:
            ended, why = self.ended[rid]
            raise Refused(f"{what}: rollout {rid} was {why}" + (f" (recorded as {ended.recorded})" if ended.recorded
                                                                else "") + ": reset to start another", 410)
        raise Refused(f"{what}: no rollout {shown(rid, 40)} on this server (never started, or the server restarted): "
                      "reset to start one", 404)

    def _remember(self, rid: str, ended: Ended, why: str) -> None:
        self.ended[rid] = (ended, why)
        while len(self.ended) > ENDED_MEMORY:
            self.ended.popitem(last=False)

    @staticmethod
    def _check_frames(frames: dict[str, np.ndarray], side: int) -> None:
        """Each camera frame has a size: not empty, not larger than `side` (`max_frame_side`) a side."""
        for r, f in frames.items():
            if f.ndim != 3 or not (0 < f.shape[0] <= side and 0 < f.shape[1] <= side):
                raise ServeError(f"reset: camera {r} frame is {'x'.join(map(str, f.shape))}: send one [H, W, 3] frame "
                                 f"of at least 1 and at most {side} pixels a side")

    def _size_of(self, frames: dict[str, np.ndarray]) -> tuple[CameraMap, int]:
        """The camera map and tier the first camera's frame would fix (nothing is kept)."""
        h, w = next(iter(frames.values())).shape[:2]
        return self._sized(*returned_size(h, w, self.tier or _smallest_tier(h, w)))

    def _sized(self, height: int, width: int) -> tuple[CameraMap, int]:
        """The camera map and tier of a model stream of this size, checked (nothing is kept)."""
        tier = self.tier or _smallest_tier(height, width)
        check_stream_size(height, width, tier, "serve")
        return CameraMap(self.layout, height, width), tier

    def _keep_size(self, cameras: CameraMap, tier: int) -> None:
        """Fix the model stream's size (and tier) for every later rollout, with the recorder of that size."""
        recorder = None if self.record is None else EpisodeRecorder(
            self.record, self.fps, self.keys, cameras.camera_sizes(), self.actions.names, self.sc.lossless)
        self.cameras, self.tier, self.recorder = cameras, tier, recorder

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
    judge = scene_judge(sc.judge) if sc.judge.kind == "scene" else rollout_judge(sc.judge)
    return WorldModel(pipe, actions, layout, size, fps, sc, keys, label, sc.record, tier, view_point, judge,
                      chunk_sampler(pipe, sc))


def chunk_sampler(pipe, sc: ServeConfig) -> ChunkSampler:
    """The sampler serve.sampler names: worldtune's (batched rollouts, fixed buffers, CUDA graphs by default on CUDA)
    or the plain pipeline call; with serve.fp8, on the transformer's blocks turned float8 first (torchao)."""
    cuda = pipe._get_execution_device().type == "cuda"
    graphs = cuda and sc.cache.kind == "none" if sc.cuda_graphs is None else sc.cuda_graphs
    if graphs and not cuda:
        raise ConfigError("serve.cuda_graphs = true needs a CUDA device: unset it (or set it false) on CPU")
    _step_cache(pipe, sc)  # serve.cache: hooks on the blocks, which serve.fp8 below leaves in place
    if sc.fp8:  # before the sampler compiles or captures anything
        from worldtune.models.float8 import quantize_blocks

        n = quantize_blocks(pipe.transformer, pipe._get_execution_device(), "serve.fp8")
        print(f"serve.fp8: {n} linear layers run float8 matmuls through torchao (frames differ from bf16's)")
    return pipeline_dynamics(pipe).chunk_sampler(pipe, fast=sc.sampler == "worldtune", cuda_graphs=graphs,
                                                 compile=sc.compile)


def _step_cache(pipe, sc: ServeConfig) -> None:
    """serve.cache on the transformer's blocks (models/step_cache.py), before the sampler compiles or captures
    anything; the plain pipeline call and worldtune's sampler both give it its steps (one state per guidance
    branch)."""
    from worldtune.models.step_cache import apply_step_cache

    label = apply_step_cache(pipe.transformer, sc.cache, "serve.cache")
    if label:
        print(f"serve.cache: {label} on the transformer's blocks (frames differ from the uncached model's)")


def _max_side(cameras: CameraMap | None) -> int:
    """MAX_SCALE times the model frame's longest side; UNSIZED_SIDE before the size is known."""
    return MAX_SCALE * max(cameras.height, cameras.width) if cameras is not None else UNSIZED_SIDE


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
