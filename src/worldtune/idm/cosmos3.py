"""`Cosmos3Labeler`: per-frame actions for a video from Cosmos 3's own `inverse_dynamics` mode.

Cosmos 3 can run backwards: given a video of an embodiment it knows, its `inverse_dynamics` mode denoises the
action chunk that leads through the frames (worldtune.infer.dynamics.inverse_dynamics). That makes the world
model a labeller of generated videos, an alternative to worldtune's own small IDM (worldtune.idm.label):
no separate model to train, but the model's action head must know the robot.

How a video of T frames is labelled. The mode takes windows of K + 1 frames (K a multiple of 4, the chunk):
windows start at frames 0, K, 2K, ... (each shares its first frame with the previous one's last), and a final
window is aligned to the video's end when T - 1 is not a multiple of K; each transition t -> t+1 takes the
action of the first window that covers it. That gives T - 1 actions; the last frame, which leads nowhere,
repeats the last action (the convention of the demo data and of LeRobot recordings). The model sees the
packed video as it was trained on it (the grid of cameras is one frame, `concat_view`), and its actions come
back in the model's scaling: they are denormalised with the statistics the model was trained with (the
adapter's, else the dataset's `actions.json`), so the labels are in the dataset's units.

What trains for it. Inverse dynamics reads the noisy actions in through the domain's row of the action INPUT
projection and their velocity out through its row of the OUTPUT projection. An adapter trained with
`train.task = "inverse_dynamics"` (or `"joint"`) trains both rows and the LoRA on this very objective, and
`load_action_adapter_rows` writes both into the model. A forward-dynamics adapter trains only the input rows, and
the base model has none of its own for a new robot: on a new domain slot without an inverse-dynamics adapter the
output rows are the checkpoint's untouched slot and the labels are meaningless, which the labeller says (a
warning, and `note` in the provenance). A seed model made with actions is the exception: its recipe trained both
rows of the scene robot's slot, which it knows (worldtune.seed.trained_action_domain). `compare` in
worldtune.idm.compare measures the labels on held-out real clips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from worldtune.errors import ConfigError, DatasetError

if TYPE_CHECKING:
    from worldtune.models.action_dynamics import ActionDomain


def windows(length: int, chunk: int) -> list[int]:
    """First frames of the inverse-dynamics windows of `chunk` + 1 frames over a video of `length` frames."""
    if length - 1 < chunk:
        return [0]
    starts = list(range(0, length - chunk, chunk))
    if starts[-1] + chunk < length - 1:
        starts.append(length - 1 - chunk)
    return starts


class Cosmos3Labeler:
    """Labels packed videos with Cosmos 3's inverse dynamics: frames [T, H, W, 3] -> actions [T, D] in dataset units."""

    def __init__(self, pipe, domain, names: list[str], key: str, normalization: str, stats: dict[str, Any] | None,
                 cameras: dict[str, str], chunk: int, tier: int, view_point: str, fps: float, steps: int,
                 guidance: float, seed: int, source: str, robot_type: str | None = None,
                 output_rows: str = "adapter", note: str | None = None) -> None:
        self.pipe, self.domain, self.names, self.action_key = pipe, domain, names, key
        self.output_rows, self.note = output_rows, note  # who trained the domain's output rows; a caveat
        self.normalization, self.stats = normalization, stats
        self.cameras = cameras  # role -> the dataset's camera key
        self.chunk, self.tier, self.view_point, self.fps = chunk, tier, view_point, fps
        self.steps, self.guidance, self.seed, self.source, self.robot_type = steps, guidance, seed, source, robot_type

    @property
    def action_names(self) -> list[str]:
        return list(self.names)

    def label_video(self, frames: np.ndarray, task: str) -> np.ndarray:
        """Actions [T, D] float32 in the dataset's units for a packed video [T, H, W, 3] uint8."""
        from worldtune.data.actions import denormalize
        from worldtune.infer.dynamics import inverse_dynamics

        t = len(frames)
        if t < 5:
            raise DatasetError(f"a video of {t} frames is too short for Cosmos 3 inverse dynamics (it needs 4k + 1 >= 5 "
                               "frames): generate longer videos or label with trajectories.labeller = \"idm\"")
        chunk = min(self.chunk, (t - 1) // 4 * 4)
        out = np.full((t, self.domain.width), np.nan, np.float32)
        for s in windows(t, chunk):
            pred = inverse_dynamics(self.pipe, np.ascontiguousarray(frames[s:s + chunk + 1]), self.domain, task or "",
                                    seed=self.seed, steps=self.steps, guidance=self.guidance, tier=self.tier,
                                    view_point=self.view_point, fps=self.fps)
            fill = np.isnan(out[s:s + chunk, 0])
            out[s:s + chunk][fill] = pred[fill]
        out[-1] = out[-2]
        if self.normalization != "none" and self.stats is not None:
            out = np.asarray(denormalize(out.astype(np.float64), self.stats, self.normalization), np.float32)
        return out


def load_cosmos3_labeler(cfg, dataset_hint: str | None, fps: float) -> Cosmos3Labeler:
    """The [model] pipeline (with `trajectories.cosmos3.adapter` when given) as a labeller of `fps` videos, with the
    action facts of the prepared dataset (`trajectories.cosmos3.dataset`, else `dataset_hint`)."""
    import torch

    from worldtune.data.actions import read_index
    from worldtune.data.dynamics import choose_tier, choose_view_point
    from worldtune.models.action_dynamics import ActionDomain
    from worldtune.models.family import family_of
    from worldtune.models.load import load_pipeline

    cc = cfg.trajectories.cosmos3
    where = cc.dataset or dataset_hint
    if not where or not (Path(where) / "info.json").is_file():
        raise ConfigError(f"trajectories.labeller = \"cosmos3\" needs the prepared dataset with actions (its domain and "
                          f"statistics): set trajectories.cosmos3.dataset (got {where!r})")
    dataset = Path(where)
    info = json.loads((dataset / "info.json").read_text(encoding="utf-8"))
    index = read_index(dataset)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu") if cfg.trajectories.device == "auto" \
        else torch.device(cfg.trajectories.device)
    dtype = cfg.model.dtype if device.type == "cuda" else "fp32"
    pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype=dtype, device="cpu", seed=cfg.model.seed,
                               vae_dtype=dtype, revision=cfg.model.revision, random_weights=cfg.model.random_weights)
    family = family_of(spec)
    dyn = family.dynamics()  # a model without an action mode: its one-line error
    if not family.has_action_heads(pipe.transformer):
        raise ConfigError(f"model {spec.name} has no action heads (action_gen = false): the cosmos3 labeller needs a "
                          "Cosmos 3 model with them")
    facts: dict[str, Any] = {}
    if cc.adapter:
        from worldtune.infer.adapters import activate, check_adapter, load_adapters

        facts = dyn.read_adapter_info(cc.adapter)
        if facts["domain"] != index["domain"]:
            raise ConfigError(f"adapter {cc.adapter} drives domain {facts['domain']} but {dataset}/actions.json has "
                              f"{index['domain']}: label with the adapter trained on this dataset")
        lora = check_adapter(cc.adapter, pipe.transformer, "fd", 1.0, family.adapter_info())
        load_adapters(pipe.transformer, [lora])
        activate(pipe.transformer, lora, True)
        dyn.load_adapter_rows(pipe.transformer, cc.adapter)
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    h, w = int(info["height"]), int(info["width"])
    tier = int(facts.get("tier") or choose_tier(h, w, "auto", dyn.canvas)) if cc.tier == "auto" else int(cc.tier)
    view = str(facts.get("view_point") or choose_view_point("auto", info)) if cc.view_point == "auto" else cc.view_point
    chunk = cc.chunk or int(facts.get("chunk_size") or 0) or (int(info["num_frames"]) - 1) // 4 * 4
    if chunk < 4:
        raise ConfigError(f"{dataset}: clips of {info['num_frames']} frames give no inverse-dynamics chunk (4k + 1 >= 5 "
                          "frames): set trajectories.cosmos3.chunk")
    scaling = (facts.get("normalization"), facts.get("stats")) if cc.adapter else (
        index.get("normalization"), (index.get("stats") or {}).get("action"))
    names = list(index.get("names") or [f"action_{i}" for i in range(int(index["width"]))])
    cameras = {str(r): str(k) for r, k in (info.get("cameras") or {}).items()}
    domain = ActionDomain(**index["domain"])
    output_rows, note = _output_rows(domain, facts if cc.adapter else None,
                                     _checkpoint_domain(cfg.model.name, cfg.model.path, cfg.model.revision))
    if note:
        print(f"warning: {note}")
    return Cosmos3Labeler(pipe, domain, names, str(index.get("key") or "action"),
                          str(scaling[0] or "none"), scaling[1], cameras, chunk, tier, view, fps, cc.steps,
                          cc.guidance, cc.seed, f"{spec.name}" + (f" + {cc.adapter}" if cc.adapter else ""),
                          output_rows=output_rows, note=note)


def _checkpoint_domain(name: str | None, path: str | None, revision: str | None) -> ActionDomain | None:
    """The new robot slot whose output rows the loaded checkpoint itself trained: a seed model's (its recipe trained
    inverse dynamics on the scene robot), else None (a released checkpoint trained its released domains only)."""
    from worldtune.models.load import seed_weights_in
    from worldtune.seed import trained_action_domain

    seed = seed_weights_in(name, path, revision)
    return trained_action_domain(seed) if seed else None


def _output_rows(domain: ActionDomain, facts: dict[str, Any] | None,
                 trained: ActionDomain | None = None) -> tuple[str, str | None]:
    """Who trained the domain's rows of the action output projection ("adapter" or "checkpoint"), and, for a new
    robot's slot that neither an inverse-dynamics adapter nor the checkpoint trained, the caveat that its labels mean
    nothing. `trained`: the new slot the checkpoint's own training covered (a seed model's robot), if any."""
    from worldtune.train.action_flow import predicts_actions

    if facts is not None and predicts_actions(facts.get("task")):
        return "adapter", None
    if not domain.new or domain == trained:
        return "checkpoint", None
    return "checkpoint", (f"domain '{domain.name}' is a new slot ({domain.id}) whose action output rows were never "
                          "trained, so Cosmos 3's labels for it are meaningless: post-train inverse dynamics on this "
                          "dataset (train.task = \"inverse_dynamics\" or \"joint\") and pass that run's export as "
                          "trajectories.cosmos3.adapter")
