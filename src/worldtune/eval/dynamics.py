"""`evaluate.mode = "actions"`: a forward-dynamics model driven by the real actions, scored against what happened.

A forward-dynamics world model is asked "what happens if the robot does this?". The honest test of the answer
is a held-out episode: give the model the episode's real first frame and the action chunk the robot really
executed, and compare the video it makes with the episode's real continuation. This module writes that
experiment as an ordinary generation folder (`worldtune.infer.records`, format `worldtune.generations` v1),
which the evaluate stage then scores like any other: pixel metrics per camera view and as curves over the
horizon, paired differences to the base model with bootstrap CIs, the report.

Two drives per clip and model:

- `own` (model label as is): the clip's own action chunk;
- `other` (label + OTHER_SUFFIX): the action chunk of a clip of ANOTHER episode, assigned by a seeded
  derangement (`derangement`): same first frame, same seed, same task text, only the actions differ.

A model that uses its actions is closer to the real continuation under its own actions, so the paired
difference own - other (the *action sensitivity*, worldtune.eval.scores) is positive for PSNR-like metrics.
A model that ignores its actions makes the same video under both drives (difference 0), however good its
pictures are; that is what this figure separates from the plain scores.

Rows carry `actions` ("own" / "other") and `actions_from` (the clip whose actions drove it). Model variants
are the base model (its checkpoint's projection rows for the domain) and each forward-dynamics adapter
(LoRA + its domain rows, loaded into the same transformer and switched, rows restored in between). The
actions are scaled as each model was trained: an adapter's recorded normalisation, else the dataset's
`actions.json`. Resumable: a finished row with the same parameters is not generated again.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.errors import ConfigError, DatasetError
from worldtune.infer import records

OTHER_SUFFIX = "+other_actions"  # model label of a model driven by another episode's actions
FOLDER = "generations"  # inside evaluate.out
BASE_LABEL = "base"


def is_other(label: str) -> bool:
    return label.endswith(OTHER_SUFFIX)


def own_label(label: str) -> str:
    """The label of the same model under its own actions."""
    return label[: -len(OTHER_SUFFIX)] if is_other(label) else label


# ------------------------------------------------------------------------------------ inputs
def derangement(groups: list[Any], seed: int) -> list[int]:
    """A seeded permutation p of range(n) with groups[p[i]] != groups[i] for every i: each input takes the actions
    of an input of another group (episode). Drawn by rejection from uniform permutations (so every valid
    assignment is equally likely); an assignment that cannot exist (one group holds more than half the inputs)
    is a one-line error."""
    n = len(groups)
    largest = max((groups.count(g) for g in set(groups)), default=0)
    if n < 2 or 2 * largest > n:
        raise DatasetError(f"another episode's actions need inputs from at least two episodes with no episode holding "
                           f"more than half of them ({n} inputs, {largest} from one episode): evaluate more held-out "
                           "episodes, lower evaluate.actions.clips_per_episode, or set evaluate.actions.other_actions "
                           "= false")
    rng = np.random.default_rng(seed)
    for _ in range(100_000):
        p = rng.permutation(n)
        if all(groups[p[i]] != groups[i] for i in range(n)):
            return [int(x) for x in p]
    raise DatasetError(f"no derangement of {n} inputs found for evaluate.actions.shuffle_seed = {seed}: try another seed")


@dataclass
class ActionClip:
    """One held-out clip: its manifest row, frames [F, H, W, 3] and raw action chunk [F-1, D]."""

    row: dict[str, Any]
    frames: np.ndarray
    actions: np.ndarray

    @property
    def name(self) -> str:
        return str(self.row["clip_id"])

    @property
    def episode(self) -> int:
        return int(self.row["episode_index"])


def pick_clips(dataset: Path, split: str, per_episode: int, max_inputs: int | None) -> list[dict[str, Any]]:
    """Manifest rows of the clips to drive: of the split, the first `per_episode` of each episode, by name."""
    import pyarrow.parquet as pq

    path = dataset / "manifest.parquet"
    if not path.is_file():
        raise DatasetError(f"{path} not found: evaluate.actions.dataset must be a folder `worldtune prepare` wrote")
    rows = [r for r in pq.read_table(path).to_pylist() if split == "all" or r.get("split") == split]
    picked: list[dict[str, Any]] = []
    taken: dict[int, int] = {}
    for r in sorted(rows, key=lambda r: (int(r["episode_index"]), int(r.get("start_frame") or 0), str(r["clip_id"]))):
        e = int(r["episode_index"])
        if taken.get(e, 0) < per_episode:
            taken[e] = taken.get(e, 0) + 1
            picked.append(r)
    picked.sort(key=lambda r: str(r["clip_id"]))
    picked = picked[:max_inputs] if max_inputs else picked
    if not picked:
        raise DatasetError(f"{path} has no clips with split = {split!r}: prepare with prepare.val_fraction > 0, or set "
                           "evaluate.actions.split = \"all\"")
    return picked


def load_clips(dataset: Path, rows: list[dict[str, Any]], width: int) -> list[ActionClip]:
    """Each clip's packed frames and raw action chunk (checked: [F-1, width], finite)."""
    from worldtune.data.actions import check_chunk, clip_chunk, load_clip
    from worldtune.data.dataset import read_clip_frames

    out = []
    for r in rows:
        frames = read_clip_frames(dataset, r)
        chunk = clip_chunk(load_clip(dataset, r["clip_id"])["action"], int(r.get("stride") or 1))
        chunk = check_chunk(chunk, width, str(dataset / "actions" / f"{r['clip_id']}.safetensors"))
        if len(chunk) != len(frames) - 1:
            raise DatasetError(f"{dataset}: clip {r['clip_id']} has {len(frames)} frames but {len(chunk)} actions: "
                               "rerun prepare into a new folder")
        out.append(ActionClip(r, frames, chunk))
    return out


# ------------------------------------------------------------------------------------ models
@dataclass
class ActionModel:
    """One model to drive: the base or an adapter, and how its actions are scaled and captioned."""

    label: str
    adapter: Any | None  # worldtune.infer.adapters.AdapterFile
    normalization: str
    stats: dict[str, Any] | None
    tier: int
    view_point: str

    def scale(self, actions: np.ndarray) -> np.ndarray:
        from worldtune.data.actions import normalize

        if self.normalization == "none" or self.stats is None:
            return actions.astype(np.float32)
        return np.asarray(normalize(actions.astype(np.float64), self.stats, self.normalization), np.float32)


def plan_models(ac, pipe, family, index: dict[str, Any], info: dict[str, Any]) -> list[ActionModel]:
    """The base model (if asked) and every adapter, checked against the transformer and the dataset's domain."""
    from worldtune.data.dynamics import choose_tier, choose_view_point
    from worldtune.infer.adapters import check_adapter
    from worldtune.infer.generate import adapter_label
    from worldtune.names import safe_name

    dyn = family.dynamics()
    h, w = int(info["height"]), int(info["width"])
    auto_tier = choose_tier(h, w, ac.tier, dyn.canvas)
    auto_view = choose_view_point(ac.view_point, info)
    models: list[ActionModel] = []
    if ac.include_base:
        models.append(ActionModel(BASE_LABEL, None, str(index.get("normalization") or "none"),
                                  (index.get("stats") or {}).get("action"), auto_tier, auto_view))
    for spec in ac.adapters:
        label = safe_name(spec.name, fallback="adapter") if spec.name else adapter_label(spec.path)
        facts = dyn.read_adapter_info(spec.path)
        dyn.require_mode(facts, "forward_dynamics", spec.path)
        if facts["domain"] != index["domain"]:
            raise ConfigError(f"adapter {spec.path} drives domain {facts['domain']} but {ac.dataset}/actions.json has "
                              f"{index['domain']}: evaluate it on the dataset it was trained on")
        adapter = check_adapter(spec.path, pipe.transformer, label, spec.scale, family.adapter_info())
        tier = int(facts.get("tier") or auto_tier) if ac.tier == "auto" else int(ac.tier)
        view = str(facts.get("view_point") or auto_view) if ac.view_point == "auto" else ac.view_point
        models.append(ActionModel(label, adapter, str(facts.get("normalization") or "none"), facts.get("stats"),
                                  tier, view))
    labels = [m.label for m in models]
    if not models:
        raise ConfigError("nothing to evaluate: evaluate.actions.include_base = false and no evaluate.actions.adapters")
    if len(set(labels)) != len(labels) or any(is_other(x) for x in labels):
        raise ConfigError(f"evaluate.actions.adapters: model labels {labels} must be distinct, not '{BASE_LABEL}' and "
                          f"not end in '{OTHER_SUFFIX}': set `name`")
    return models


class DomainRows:
    """The checkpoint's action-projection tables, kept so that each model starts from them: an adapter's rows are
    written into the tables in place (input, and output where it trained them), and the next model must not see
    them."""

    def __init__(self, transformer, loaded: bool, dynamics) -> None:
        self.transformer, self.loaded = transformer, loaded  # loaded: LoRA adapters were injected
        self.dynamics = dynamics  # the family's action interface (ModelFamily.dynamics())
        self.saved = {n: transformer.get_submodule(n).weight.detach().clone() for n in dynamics.row_tables}

    def use(self, model: ActionModel):
        """Restore the checkpoint's rows, then (adapter) load the adapter's rows and switch the LoRA on."""
        import torch

        from worldtune.infer.adapters import activate

        with torch.no_grad():
            for n, w in self.saved.items():
                self.transformer.get_submodule(n).weight.copy_(w)
        activate(self.transformer, model.adapter, loaded=self.loaded)
        if model.adapter is not None:
            self.dynamics.load_adapter_rows(self.transformer, model.adapter.path)


# ------------------------------------------------------------------------------------ generation
def _device(setting: str):
    import torch

    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def _load(cfg):
    """The Cosmos 3 pipeline of `[model]`, with action heads, on the configured device."""
    from worldtune.models.family import family_of
    from worldtune.models.load import load_pipeline

    device = _device(cfg.evaluate.actions.device)
    dtype = cfg.model.dtype if device.type == "cuda" else "fp32"
    pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype=dtype, device="cpu", seed=cfg.model.seed,
                               vae_dtype=dtype, revision=cfg.model.revision, random_weights=cfg.model.random_weights)
    family = family_of(spec)
    family.dynamics()  # a model family without an action mode: its one-line error
    if not family.has_action_heads(pipe.transformer):
        raise ConfigError(f"model {spec.name} has no action heads (action_gen = false): evaluate.mode = \"actions\" "
                          "needs a Cosmos 3 model with them")
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe, spec, family


def _params_hash(model: ActionModel, clip: str, donor: str, seed: int, ac, fingerprint: str) -> str:
    blob = json.dumps({"model": model.label, "adapter": str(model.adapter.file) if model.adapter else None,
                       "scale": model.adapter.scale if model.adapter else None, "clip": clip, "actions_from": donor,
                       "seed": seed, "steps": ac.steps, "guidance": ac.guidance, "tier": model.tier,
                       "view_point": model.view_point, "normalization": model.normalization,
                       "base": fingerprint}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _fit(video: np.ndarray, height: int, width: int) -> np.ndarray:
    """The generated frames at the clip's size (the pipeline returns the content size rounded to 16 pixels)."""
    if video.shape[1:3] == (height, width):
        return video
    import cv2

    return np.stack([cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in video])


def generate_under_actions(cfg) -> Path:
    """Drive every model by each held-out clip's own (and another episode's) actions; write the generation folder
    `<evaluate.out>/generations` and return it."""
    from worldtune.data.actions import read_index
    from worldtune.data.video import write_video
    from worldtune.infer.adapters import load_adapters
    from worldtune.infer.dynamics import forward_dynamics
    from worldtune.infer.views import layout_roles, split_views
    from worldtune.models.action_dynamics import ActionDomain

    ac = cfg.evaluate.actions
    dataset = Path(ac.dataset)
    info_path = dataset / "info.json"
    if not info_path.is_file():
        raise DatasetError(f"{info_path} not found: evaluate.actions.dataset must be a folder `worldtune prepare` wrote")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    if (info.get("layout") or {}).get("type") == "separate":
        raise ConfigError(f"{dataset} keeps camera views separate: forward dynamics takes one packed video per clip; "
                          "prepare with prepare.layout = \"grid\" or \"single\"")
    index = read_index(dataset)
    domain = ActionDomain(**index["domain"])
    fps = float(info.get("fps") or 0) or None
    if fps is None:
        raise DatasetError(f"{info_path} records no fps: rerun prepare")
    rows = pick_clips(dataset, ac.split, ac.clips_per_episode, ac.max_inputs)
    clips = load_clips(dataset, rows, domain.width)
    donors = derangement([c.episode for c in clips], ac.shuffle_seed) if ac.other_actions else None

    from worldtune.console import setting_up
    from worldtune.models.load import fingerprint

    with setting_up("evaluate", "loading model"):
        pipe, spec, family = _load(cfg)

    base_fp = fingerprint(pipe.transformer)  # before any adapter is injected
    models = plan_models(ac, pipe, family, index, info)
    adapters = [m.adapter for m in models if m.adapter is not None]
    if adapters:
        load_adapters(pipe.transformer, adapters)
    rows_state = DomainRows(pipe.transformer, loaded=bool(adapters), dynamics=family.dynamics())
    out = Path(cfg.evaluate.out) / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    layout = info.get("layout")
    records.write_info(out, layout, fps, dataset=str(dataset.resolve()))
    done = records.all_rows(out)
    roles = layout_roles(layout)
    truth = {c.name: _write_truth(out, dataset, c, layout, fps) for c in clips}
    drives = [("own", i) for i in range(len(clips))] + ([("other", i) for i in range(len(clips))] if donors else [])
    jobs = [(m, kind, i, seed) for m in models for kind, i in drives for seed in ac.seeds]
    from worldtune.console import Progress

    t0, made = time.time(), 0
    with Progress("forward dynamics", len(jobs), "videos") as bar:
        current = None
        for m, kind, i, seed in jobs:
            clip = clips[i]
            donor = clips[donors[i]] if kind == "other" and donors else clip
            label = m.label + (OTHER_SUFFIX if kind == "other" else "")
            phash = _params_hash(m, clip.name, donor.name, seed, ac, base_fp)
            if records.is_complete(out, done.get((label, clip.name, seed)), phash):
                bar.advance()
                continue
            if current is not m:
                rows_state.use(m)
                current = m
            started = time.time()
            video = forward_dynamics(pipe, clip.frames[0], m.scale(donor.actions), domain, str(clip.row["task"]),
                                     seed=seed, steps=ac.steps, guidance=ac.guidance, tier=m.tier,
                                     view_point=m.view_point, fps=fps)
            video = _fit(video, *clip.frames.shape[1:3])
            rel = Path(label) / f"{clip.name}_s{seed}.mp4"
            views = {}
            for role, frames in split_views(video, layout).items():
                views[role] = str(Path(label) / f"{clip.name}_s{seed}" / f"{role}.mp4")
                write_video(out / views[role], frames, fps)
            write_video(out / rel, video, fps)  # last: the main file existing means the views do too
            gt, gt_views = truth[clip.name]
            records.append_row(out, 0, {
                "model": label, "name": clip.name, "seed": seed, "video": str(rel), "views": views,
                "ground_truth": gt, "ground_truth_views": gt_views, "instruction": clip.row.get("task"),
                "prompt": clip.row.get("task"), "fps": fps, "num_frames": int(len(video)),
                "height": int(video.shape[1]), "width": int(video.shape[2]), "mode": "forward_dynamics",
                "actions": kind, "actions_from": donor.name, "episode_index": clip.episode,
                "actions_episode": donor.episode, "adapter": str(m.adapter.path) if m.adapter else None,
                "steps": ac.steps, "guidance": ac.guidance, "tier": m.tier, "view_point": m.view_point,
                "domain": domain.to_dict(), "elapsed_s": round(time.time() - started, 3), "params_hash": phash})
            made += 1
            bar.advance()
    records.merge(out)
    from rich.console import Console

    Console().print(f"forward dynamics under real actions: {made} new video(s) of {len(jobs)} "
                    f"({len(models)} model(s) x {len(clips)} clip(s) x {len(ac.seeds)} seed(s)"
                    f"{' x own/other actions' if donors else ''}) in {time.time() - t0:.1f} s -> {out}"
                    + (f"; views {roles}" if roles else ""))
    return out


def _write_truth(out: Path, dataset: Path, clip: ActionClip, layout: dict[str, Any] | None,
                 fps: float) -> tuple[str, dict[str, str]]:
    """The real clip (copied as prepared) and its camera views under ground_truth/, once."""
    from worldtune.data.video import write_video
    from worldtune.infer.views import split_views

    src = dataset / clip.row["video"]
    rel = Path("ground_truth") / f"{clip.name}{src.suffix}"
    views = {}
    for role, frames in split_views(clip.frames, layout).items():
        views[role] = str(Path("ground_truth") / clip.name / f"{role}.mp4")
        if not (out / views[role]).is_file():
            write_video(out / views[role], frames, fps)
    if not (out / rel).is_file():
        from worldtune.atomic import atomic_write_bytes

        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out / rel, src.read_bytes())
    return str(rel), views
