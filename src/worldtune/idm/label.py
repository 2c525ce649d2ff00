"""`ActionLabeler`: per-frame actions for a video's camera views, from a trained IDM.

The IDM predicts a chunk of H actions from every window start t; frame j is covered by the
chunks of starts j-H+1..j, and its label is their average (GR00T-Dreams labels this way too:
overlapping chunks smooth each other's errors). Windows near the end repeat the last frame, as in
training. The same function labels held-out real episodes for the IDM's report and generated
videos for export, so the report measures exactly what export does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.data.layout import resize_frames
from worldtune.errors import DatasetError
from worldtune.idm.model import InverseDynamicsModel, load_idm, window_indices


def resolve_device(device: str) -> torch.device:
    """"auto" -> this process's GPU when CUDA is available, else the CPU."""
    if device != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
    return torch.device("cpu")


class ActionLabeler:
    """Labels videos with a trained IDM: {role: frames [T,h,w,3]} -> actions [T, D] in dataset units."""

    def __init__(self, model: InverseDynamicsModel, meta: dict[str, Any], batch: int = 64) -> None:
        self.model, self.meta, self.batch = model, meta, max(1, batch)
        self.device = next(model.parameters()).device
        self.roles: list[str] = list(meta["cameras"])
        a = meta["architecture"]
        self.size = (int(a["height"]), int(a["width"]))
        self.resize = meta.get("resize", "pad")

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", batch: int = 64) -> "ActionLabeler":
        model, meta = load_idm(path, resolve_device(device))
        return cls(model, meta, batch)

    @property
    def action_names(self) -> list[str]:
        return list(self.meta["action_names"])

    def prepare(self, views: dict[str, np.ndarray]) -> np.ndarray:
        """The IDM's input for a video: [V, T, h, w, 3] uint8, views in the IDM's role order."""
        missing = [r for r in self.roles if r not in views]
        if missing:
            raise DatasetError(f"the IDM needs camera views {missing}, the video has {sorted(views)}")
        resized = [resize_frames(views[r], *self.size, self.resize) for r in self.roles]
        n = min(len(v) for v in resized)
        return np.stack([v[:n] for v in resized])

    def label(self, views: dict[str, np.ndarray]) -> np.ndarray:
        return self.label_prepared(self.prepare(views))

    @torch.no_grad()
    def label_prepared(self, views: np.ndarray) -> np.ndarray:
        """Actions [T, D] float32 for prepared views [V, T, h, w, 3]: overlapping chunks averaged per frame."""
        m = self.model
        frames = torch.from_numpy(np.ascontiguousarray(views)).to(self.device)
        t_len = frames.shape[1]
        sums = torch.zeros(t_len + m.horizon, m.action_dim, device=self.device)
        counts = torch.zeros(t_len + m.horizon, device=self.device)
        for s in range(0, t_len, self.batch):
            starts = np.arange(s, min(t_len, s + self.batch))
            fidx, _ = window_indices(starts, t_len, m.horizon)
            windows = frames[:, torch.from_numpy(fidx).to(self.device)].transpose(0, 1)  # [b, V, F, h, w, 3]
            pred = m(windows)  # [b, H, D]
            target = torch.from_numpy(starts[:, None] + np.arange(m.horizon)).to(self.device).reshape(-1)
            sums.index_add_(0, target, pred.reshape(-1, m.action_dim).float())
            counts.index_add_(0, target, torch.ones_like(target, dtype=counts.dtype))
        avg = sums[:t_len] / counts[:t_len, None]
        return m.denormalize(avg).cpu().numpy().astype(np.float32)
