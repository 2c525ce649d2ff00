"""A tiny pinhole renderer for validating the Sampson metric with known cameras.

The scene is the inside corner of a textured box (floor, back wall, left wall). Seen from inside,
those three planes never occlude each other, so each can be drawn independently with the exact
homography a plane induces in a pinhole camera: every rendered pixel is a true projection, and
the cameras' F is known exactly. Not a copy of any library's renderer: ~60 lines of geometry.
Also: tiny 2x2 grid videos and generation folders (the format of worldtune.infer.records) for tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np


@dataclass(frozen=True)
class Cam:
    K: np.ndarray
    R: np.ndarray
    t: np.ndarray  # x_cam = R X + t

    def project(self, X: np.ndarray) -> np.ndarray:
        x = (self.K @ (self.R @ X.T + self.t[:, None])).T
        return x[:, :2] / x[:, 2:3]


def look_at(center, target, width: int = 320, height: int = 180, focal: float = 260.0) -> Cam:
    c, tg = np.asarray(center, float), np.asarray(target, float)
    z = (tg - c) / np.linalg.norm(tg - c)
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z])
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1]])
    return Cam(K, R, -R @ c)


# plane: origin O, axes a, b spanning it (world units per texture side)
PLANES = {
    "floor": (np.array([-1.0, 0.0, 0.0]), np.array([2.0, 0, 0]), np.array([0, 2.0, 0])),
    "back": (np.array([-1.0, 2.0, 0.0]), np.array([2.0, 0, 0]), np.array([0, 0, 1.5])),
    "left": (np.array([-1.0, 0.0, 0.0]), np.array([0, 2.0, 0]), np.array([0, 0, 1.5])),
}
TEX = 384


def texture(seed: int) -> np.ndarray:
    """Multi-scale noise plus random shapes: plenty of distinctive SIFT features."""
    rng = np.random.default_rng(seed)
    img = np.zeros((TEX, TEX), np.float32)
    for cells, weight in ((6, 0.5), (24, 0.3), (96, 0.2)):
        img += weight * cv2.resize(rng.random((cells, cells), dtype=np.float32), (TEX, TEX), interpolation=cv2.INTER_CUBIC)
    img = (np.clip(img, 0, 1) * 255).astype(np.uint8)
    for _ in range(60):
        p = tuple(int(v) for v in rng.integers(0, TEX, 2))
        col = int(rng.integers(0, 256))
        if rng.random() < 0.5:
            cv2.circle(img, p, int(rng.integers(3, 14)), col, -1)
        else:
            q = tuple(int(v) for v in np.clip(np.array(p) + rng.integers(-20, 20, 2), 0, TEX - 1))
            cv2.rectangle(img, p, q, col, -1)
    return np.stack([img, np.roll(img, 7, 0), np.roll(img, 13, 1)], -1)


TEXTURES = {name: texture(i + 1) for i, name in enumerate(PLANES)}


def render(cam: Cam, width: int = 320, height: int = 180) -> np.ndarray:
    """The box corner seen by `cam`, uint8 RGB."""
    out = np.zeros((height, width, 3), np.uint8)
    for name, (O, a, b) in PLANES.items():
        # texture pixel (u, v) -> world O + a u/TEX + b v/TEX -> image: a homography
        M = np.stack([cam.R @ a / TEX, cam.R @ b / TEX, cam.R @ O + cam.t], axis=1)
        H = cam.K @ M
        warped = cv2.warpPerspective(TEXTURES[name], H, (width, height), flags=cv2.INTER_LINEAR)
        mask = cv2.warpPerspective(np.full((TEX, TEX), 255, np.uint8), H, (width, height), flags=cv2.INTER_NEAREST)
        out[mask > 0] = warped[mask > 0]
    return out


def exterior_cams(t: int = 0) -> tuple[Cam, Cam]:
    """Two fixed exterior cameras (t is ignored: they do not move)."""
    return look_at([0.5, -1.2, 1.1], [-0.2, 1.2, 0.3]), look_at([-0.4, -1.2, 1.0], [0.0, 1.3, 0.4])


def moving_cam(t: int) -> Cam:
    """A camera that translates and turns a little every frame (a 'wrist')."""
    return look_at([0.3 - 0.03 * t, -0.8 + 0.02 * t, 1.0 + 0.01 * t], [-0.3 + 0.02 * t, 1.5, 0.4])


def sine_warp(img: np.ndarray, amplitude: float, period: float = 37.0, phase: float = 0.0) -> np.ndarray:
    """Shift pixels by a smooth non-projective field of `amplitude` px: no camera explains it."""
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    mx = xx + amplitude * np.sin(2 * np.pi * yy / period + phase)
    my = yy + amplitude * np.cos(2 * np.pi * xx / (period * 1.3) + phase)
    return cv2.remap(img, mx.astype(np.float32), my.astype(np.float32), cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def shifted_view(episode, role: str, shifts: np.ndarray) -> np.ndarray:
    """Frames of `role` of a worldtune.scene.episode episode, frame i moved by shifts[i] (dx, dy) px.

    Rendered with the principal point moved, so the shift is exact: no resampling blur that
    would change which features the detector finds.
    """
    from worldtune.scene.raycast import Camera, render as ray_render

    out = []
    for i, (dx, dy) in enumerate(np.asarray(shifts, np.float64)):
        c = episode.camera(role, i)
        cam = Camera(c.K + np.array([[0, 0, dx], [0, 0, dy], [0, 0, 0]]), c.R, c.t, c.width, c.height)
        depth, color = ray_render(cam, episode._static(), episode.tex)
        ray_render(cam, episode._moving(i), episode.tex, depth, color)
        out.append((np.clip(color, 0, 1) * 255 + 0.5).astype(np.uint8).reshape(c.height, c.width, 3))
    return np.stack(out)


def across_epipolar_lines(F: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Unit direction in image 1 across the epipolar line of image 0's centre (F: x0ᵀ F x1 = 0).

    A shift along the epipolar lines is a change of depth, invisible to any two-view geometry.
    """
    h, w = size
    line = F.T @ np.array([(w - 1) / 2, (h - 1) / 2, 1.0])
    return line[:2] / np.linalg.norm(line[:2])


# ------------------------------------------------------------------ tiny generation folders
LAYOUT = {"type": "grid", "rows": 2, "cols": 2,
          "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]}}
H, W = 180, 320


def grid_frames(num_frames: int, wobble: float = 0.0, seed: int = 0) -> np.ndarray:
    """2x2 grid video of the box scene; `wobble` px of per-frame non-rigid warp (a bad generator)."""
    rng = np.random.default_rng(seed)
    a, b = exterior_cams()
    ext1, ext2 = render(a), render(b)
    frames = []
    for t in range(num_frames):
        views = [ext1, ext2, render(moving_cam(t))]
        if wobble:
            views = [sine_warp(v, wobble, period=60, phase=float(rng.uniform(0, 6.28))) for v in views]
        g = np.zeros((2 * H, 2 * W, 3), np.uint8)
        g[:H, :W], g[:H, W:], g[H:, :W] = views
        frames.append(g)
    return np.stack(frames)


def make_generation_folder(root: Path, frames: int = 5, broken: bool = False) -> Path:
    """base (wobbly) and lora (clean) x 2 seeds for one input, plus ground truth; optional bad rows."""
    from worldtune.eval.video import write_video

    root.mkdir(parents=True, exist_ok=True)
    (root / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1,
                                                "layout": LAYOUT, "fps": 16}))
    rows = []
    gt = write_video(root / "ground_truth" / "ep0.mp4", grid_frames(frames), 16)
    for model, wobble in (("base", 2.5), ("lora", 0.0)):
        for seed in (0, 1):
            rel = f"{model}/ep0_s{seed}.mp4"
            write_video(root / rel, grid_frames(frames, wobble, seed), 16)
            rows.append({"model": model, "name": "ep0", "seed": seed, "prompt": "A multi-view video shows that a robot picks.",
                         "instruction": "picks up the red cube.", "video": rel, "views": {},
                         "ground_truth": str(gt.relative_to(root)), "ground_truth_views": {},
                         "fps": 16, "num_frames": frames, "height": 2 * H, "width": 2 * W, "steps": 4, "guidance": 7.0})
    if broken:
        (root / "base" / "bad_s0.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 definitely not a video")
        write_video(root / "base" / "one_s0.mp4", grid_frames(1), 16)
        for name in ("bad", "one"):
            rows.append({**rows[0], "name": name, "video": f"base/{name}_s0.mp4", "ground_truth": None})
    with open(root / "generations.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write('{"model": "base", "name": "torn')  # a line cut by a crash
    return root
