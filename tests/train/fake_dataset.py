"""A small prepared dataset written directly in the dataset folder format (no prepare stage).

Moving coloured squares over a gradient: structured enough that a tiny model's loss falls.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldtune.data.video import write_video


def moving_square_clip(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 / width, yy * 255 / height, np.full_like(xx, 96)], -1).astype(np.float32)
    color = rng.integers(64, 255, 3)
    y0, x0 = rng.integers(0, height // 2), rng.integers(0, width // 2)
    vy, vx = rng.integers(-2, 3), rng.integers(1, 4)
    out = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        img = base.copy()
        y, x = (y0 + vy * t) % (height - 16), (x0 + vx * t) % (width - 16)
        img[y:y + 16, x:x + 16] = color
        out[t] = img.astype(np.uint8)
    return out


def write_fake_dataset(root: str | Path, n_train: int = 4, n_val: int = 1, frames: int = 17,
                       height: int = 64, width: int = 112, fps: int = 16) -> Path:
    root = Path(root)
    (root / "clips").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n_train + n_val):
        clip_id = f"ep{i:04d}_000"
        write_video(root / "clips" / f"{clip_id}.mp4", moving_square_clip(i, frames, height, width), fps)
        rows.append(dict(clip_id=clip_id, video=f"clips/{clip_id}.mp4", views=None, source="fake", episode_index=i,
                         start_frame=0, end_frame=frames, stride=1, num_frames=frames, fps=float(fps), height=height,
                         width=width, task="moves the square.", prompt=f"A robot moves square {i % 2}.",
                         cameras=["single"], split="train" if i < n_train else "val"))
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    (root / "info.json").write_text(json.dumps({
        "format": "worldtune.dataset", "version": 1, "layout": {"kind": "single"}, "height": height,
        "width": width, "num_frames": frames, "fps": fps, "stride": 1}))
    return root
