"""`InverseDynamicsModel`: a window of frames of every camera -> a chunk of H actions.

Why a small conv net trained from scratch: the IDM must learn one robot from that robot's own
demonstrations, with no downloaded weights, and label thousands of generated videos cheaply. A
window is frames t..t+H; each camera's frames are stacked along channels (motion is a difference
between neighbouring channels, which the first convolution sees directly) and encoded by one
shared conv stack; a coarse spatial grid of features is kept (where the arm is matters, so no
global pooling), and an MLP over all cameras' features predicts the H normalised actions
a_t..a_{t+H-1}. GR00T-Dreams' IDM does the same job with a SigLIP2 encoder and a flow-matching
head; this is its smallest honest stand-in.

Saved as a folder (diffusers style, symmetric save/load): `idm.json` (architecture, cameras,
action names, normalisation, provenance) + `model.safetensors` (weights and the action mean/std
buffers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from worldtune.errors import CheckpointError

FORMAT = "worldtune.idm"
VERSION = 1
POOL = (4, 4)


def window_indices(t: np.ndarray, length: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """(frame indices [B, H+1], action indices [B, H]) of windows starting at frames t; a window that
    runs past the episode's last frame repeats it (and its action), in training and labelling alike."""
    frames = np.minimum(t[:, None] + np.arange(horizon + 1), length - 1)
    return frames, frames[:, :horizon]


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.GroupNorm(min(8, cout), cout), nn.GELU())


class InverseDynamicsModel(nn.Module):
    """uint8 windows [B, V, F, h, w, 3] -> normalised action chunks [B, H, D]."""

    def __init__(self, views: int, frames: int, horizon: int, action_dim: int, channels: int = 32,
                 hidden: int = 256) -> None:
        super().__init__()
        self.views, self.frames, self.horizon, self.action_dim = views, frames, horizon, action_dim
        c = channels
        self.encoder = nn.Sequential(_block(3 * frames, c, 2), _block(c, 2 * c, 2), _block(2 * c, 4 * c, 2),
                                     nn.AdaptiveAvgPool2d(POOL))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(views * 4 * c * POOL[0] * POOL[1], hidden), nn.GELU(),
                                  nn.Linear(hidden, horizon * action_dim))
        self.register_buffer("action_mean", torch.zeros(action_dim))
        self.register_buffer("action_std", torch.ones(action_dim))

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        b, v, f, h, w, _ = windows.shape
        x = windows.permute(0, 1, 2, 5, 3, 4).reshape(b * v, f * 3, h, w).float() / 127.5 - 1.0
        feats = self.encoder(x).reshape(b, -1)
        return self.head(feats).reshape(b, self.horizon, self.action_dim)

    def normalize(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions - self.action_mean) / self.action_std

    def denormalize(self, actions: torch.Tensor) -> torch.Tensor:
        return actions * self.action_std + self.action_mean


def architecture(model: InverseDynamicsModel, channels: int, height: int, width: int) -> dict[str, int]:
    return {"views": model.views, "frames": model.frames, "horizon": model.horizon,
            "action_dim": model.action_dim, "channels": channels, "height": height, "width": width}


def save_idm(folder: Path, model: InverseDynamicsModel, meta: dict[str, Any]) -> Path:
    """Write `idm.json` + `model.safetensors` into `folder` (each file atomically)."""
    from safetensors.torch import save

    from worldtune.data.video import atomic_write_bytes

    state = {k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write_bytes(folder / "model.safetensors", save(state))
    atomic_write_bytes(folder / "idm.json", (json.dumps({"format": FORMAT, "version": VERSION, **meta}, indent=1)
                                             + "\n").encode())
    return folder


def idm_folder(path: str | Path) -> Path:
    """The model folder of an IDM run (`<run>/idm`) or the model folder itself."""
    p = Path(path)
    for cand in (p / "idm", p):
        if (cand / "idm.json").is_file():
            return cand
    raise CheckpointError(f"no IDM at {p} (no idm.json in it or in {p / 'idm'}): train one with "
                          f"`worldtune idm train` and pass its run folder")


def load_idm(path: str | Path, device: str | torch.device = "cpu") -> tuple[InverseDynamicsModel, dict[str, Any]]:
    """(model in eval mode on `device`, idm.json) of an IDM run or model folder."""
    from safetensors.torch import load_file

    folder = idm_folder(path)
    meta = json.loads((folder / "idm.json").read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CheckpointError(f"{folder / 'idm.json'}: format {meta.get('format')} v{meta.get('version')} is not "
                              f"{FORMAT} v{VERSION}: retrain it with this worldtune")
    a = meta["architecture"]
    model = InverseDynamicsModel(a["views"], a["frames"], a["horizon"], a["action_dim"], a["channels"])
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    return model.to(device).eval(), meta
