"""The action tasks of a training run (train.task = forward_dynamics, inverse_dynamics, joint).

What an action run adds to a video run, in one place so that the trainer reads the same for both: the data (clips
with their action chunks), the domain's trainable projection rows, the action caption and canvas latents of decoded
clips, the mode each sample runs in (which fixes its clean frames and whether its chunk is denoised), the
prediction and loss, and the forward-dynamics validation video. The model side is the family's action interface
(models/action_dynamics.py); the objective of the chunk is train/action_flow.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from worldtune.config import WorldtuneConfig
from worldtune.errors import ConfigError
from worldtune.models.family import family_of
from worldtune.train.action_flow import action_loss, clean_frames, draw_modes, prepare_actions
from worldtune.train.flow import FlowBatch, FlowMatchingLoss


class ActionTask:
    """An action run's data setup (`data/dynamics.DynamicsSetup`) and the family's action interface."""

    def __init__(self, cfg: WorldtuneConfig, spec) -> None:
        from worldtune.data.dataset import read_dataset
        from worldtune.data.dynamics import resolve

        tc = cfg.train
        self.setup = resolve(cfg, read_dataset(tc.dataset)[0], tc.dataset, spec)
        self.dyn = family_of(spec).dynamics()
        self.max_text = spec.max_sequence_length
        self.mode_weights = dict(tc.dynamics.mode_weights)

    @property
    def modes(self) -> tuple[str, ...]:
        return self.setup.modes

    @property
    def makes_videos(self) -> bool:
        """Inverse dynamics generates no video: its held-out action loss is the measure."""
        return "forward_dynamics" in self.setup.modes

    def objective_defaults(self, family) -> dict[str, Any]:
        """NVIDIA keys the shift on the padded canvas; the mode fixes the clean frames (first, or all)."""
        return {**family.objective_defaults(*self.setup.canvas), "cond_frames_probs": ((1, 1.0),)}

    def trainable_rows(self, transformer: torch.nn.Module, full: bool = False) -> list[torch.nn.Parameter]:
        """The domain's action-projection rows (input; output if actions are predicted); with `full` (a model
        trained from its start) the projection tables whole."""
        st = self.setup
        if full:
            return self.dyn.train_tables(transformer, outputs=st.trains_outputs)
        return self.dyn.train_rows(transformer, st.domain.id, st.init_from, outputs=st.trains_outputs)

    def encode_text(self, pipe, tasks: list[str]) -> torch.Tensor:
        """The action captions of tasks, as the cache stores them."""
        st = self.setup
        return self.dyn.prompt_ids(pipe, tasks, st.chunk, st.canvas, st.fps, st.view_point, self.max_text)

    def encode_clips(self, pipe, items: list[dict[str, Any]]) -> torch.Tensor:
        """Latents of decoded clips on the tier's canvas, as the cache stores them."""
        return torch.stack([self.dyn.encode_clip(pipe, it["frames"], self.setup.tier) for it in items])

    def flow_batch(self, objective: FlowMatchingLoss, x0: torch.Tensor, seeds: list[int], modes: list[str] | None,
                   force: dict[str, Any]) -> tuple[FlowBatch, list[str]]:
        """The noised batch with each sample in its mode (`modes`, else drawn from its seed)."""
        modes = modes or draw_modes(self.setup.modes, seeds, self.mode_weights)
        fb = objective.prepare(x0, seeds, **{**force, "num_cond": [clean_frames(m, x0.shape[2]) for m in modes]})
        return fb, modes

    def predict(self, model: torch.nn.Module, fb: FlowBatch, text: torch.Tensor, actions: torch.Tensor,
                seeds: list[int], modes: list[str], dtype: torch.dtype, fps: float | None):
        """(video velocity, the chunks' (velocity, batch) for `action_loss`)."""
        chunks = prepare_actions(actions, seeds, fb.sigma, modes)
        domains = torch.full((fb.x_t.shape[0],), self.setup.domain.id, dtype=torch.long, device=fb.x_t.device)
        pred, action_pred = self.dyn.predict(model, fb, text, chunks, domains, dtype, fps)
        return pred, (action_pred, chunks)

    @staticmethod
    def loss(scored) -> torch.Tensor:
        return action_loss(*scored)

    def sample(self, transformer: torch.nn.Module, scheduler, x0: torch.Tensor, text: torch.Tensor,
               actions: torch.Tensor, noise: torch.Tensor, steps: int, guidance: float, fps: float | None):
        """A validation video's latents: the clip's own actions drive it from its first frame."""
        return self.dyn.sample(transformer, scheduler, x0, text, actions, self.setup.domain.id, noise, steps, guidance,
                               fps)


def open_action_data(cfg: WorldtuneConfig, spec, cache_mode: bool, setup, info, rows):
    """An action task: decoded clips with their actions, or an action cache made for this setup."""
    from worldtune.data.cache import LatentCache, cache_settings, default_cache_dir
    from worldtune.data.dynamics import CACHE_KIND, CachedDynamicsClips, DecodedDynamicsClips

    tc = cfg.train
    if not cache_mode:
        if (info.get("streamed") or {}).get("keep_clips") == "val":
            raise ConfigError(f"{tc.dataset} was made by `worldtune prepare --cache`, which keeps only held-out clips as "
                              f"video and caches video latents: for train.task = \"{tc.task}\" prepare again without "
                              f"--cache, then run `worldtune cache` with train.task = \"{tc.task}\"")
        return (None, DecodedDynamicsClips(tc.dataset, rows, setup, "train"),
                DecodedDynamicsClips(tc.dataset, rows, setup, "val"), info)
    kind = family_of(spec).text_kinds[0]
    path = Path(tc.cache) if tc.cache not in (None, "auto") else default_cache_dir(
        tc.dataset, cache_settings(cfg, info, spec, kind)["key"])
    cache = LatentCache(path)
    if cache.info.get("task") != CACHE_KIND:
        raise ConfigError(f"cache {path} holds video latents, not an action cache: run `worldtune cache` with "
                          f"train.task = \"{tc.task}\" (or unset train.cache)")
    expect = {**cache_settings(cfg, info, spec, cache.info["text_kind"]), **setup.cache_info()}
    cache.check({k: expect[k] for k in ("model_id", "height", "width", "num_frames", "tier", "view_point",
                                        "action_normalization", "action_stats")})
    return cache, CachedDynamicsClips(rows, cache, "train"), CachedDynamicsClips(rows, cache, "val"), info
