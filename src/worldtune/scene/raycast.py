"""A pinhole ray caster: cameras, textured primitives (planes, boxes, cylinders) and rendering by one ray per pixel.

Why its own module: the synthetic scenes (worldtune.scene.episode, the evaluation's validation scenes) are
exact pinhole projections, so the true cameras explain every correspondence up to the pixel grid, which the
geometry metrics are validated against. Cameras use the OpenCV convention: x_cam = R @ x_world + t, +z forward,
+y down, pixel centres at integer coordinates. Textures are float32 RGB images tiled over world metres.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np


# ------------------------------------------------------------------------------------- cameras
@dataclass
class Camera:
    """A pinhole camera: x_cam = R @ x_world + t; pixel = K @ x_cam / z (centres at integers)."""

    K: np.ndarray
    R: np.ndarray
    t: np.ndarray
    width: int
    height: int

    @property
    def center(self) -> np.ndarray:
        return -self.R.T @ self.t

    def project(self, points_world: np.ndarray) -> np.ndarray:
        """(N,3) world points -> (N,2) pixel coordinates (u right, v down)."""
        pc = np.asarray(points_world, np.float64) @ self.R.T + self.t
        uv = pc @ self.K.T
        return uv[:, :2] / uv[:, 2:3]

    def depth(self, points_world: np.ndarray) -> np.ndarray:
        return (np.asarray(points_world, np.float64) @ self.R.T + self.t)[:, 2]

    def to_dict(self) -> dict:
        return {"K": self.K.tolist(), "R": self.R.tolist(), "t": self.t.tolist(),
                "width": self.width, "height": self.height}


def look_at(eye: np.ndarray, target: np.ndarray, up=(0.0, 0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """R, t of a camera at `eye` looking at `target` (OpenCV axes: x right, y down, z forward)."""
    z = np.asarray(target, float) - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, up)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z])
    return R, -R @ eye


def intrinsics(width: int, height: int, hfov_deg: float) -> np.ndarray:
    f = 0.5 * width / math.tan(math.radians(hfov_deg) / 2)
    return np.array([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1.0]])


# ------------------------------------------------------------------------------------ textures
def sample_texture(tex: np.ndarray, u: np.ndarray, v: np.ndarray, texels_per_m: float) -> np.ndarray:
    """Bilinear, tiling texture lookup at world-metre coordinates (u, v) -> (N,3)."""
    n = len(u)
    rows = -(-n // 1024)  # remap wants maps under 32767 rows: fold the list into rows of 1024
    mx = np.zeros(rows * 1024, np.float32)
    my = np.zeros(rows * 1024, np.float32)
    mx[:n] = u * texels_per_m
    my[:n] = v * texels_per_m
    out = cv2.remap(tex, mx.reshape(rows, 1024), my.reshape(rows, 1024), interpolation=cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_WRAP)
    return out.reshape(-1, 3)[:n]


# ---------------------------------------------------------------------------------- primitives
_LIGHT = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])


@dataclass
class Plane:
    """Axis-aligned plane `x[axis] = value`, optionally bounded on the other two axes."""

    axis: int
    value: float
    texture: str
    normal_sign: float = 1.0
    bounds: tuple[tuple[float, float], tuple[float, float]] | None = None
    texels_per_m: float = 400.0

    def corners(self) -> np.ndarray | None:
        return None  # planes cover the screen: no screen box

    def hit(self, o: np.ndarray, d: np.ndarray, tex: dict) -> tuple[np.ndarray, np.ndarray]:
        a, b = [k for k in range(3) if k != self.axis]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (self.value - o[self.axis]) / d[:, self.axis]
        t = np.where(np.isfinite(t) & (t > 1e-6), t, np.inf)
        pa_ = o[a] + t * d[:, a]
        pb_ = o[b] + t * d[:, b]
        if self.bounds is not None:
            (a0, a1), (b0, b1) = self.bounds
            t = np.where((pa_ >= a0) & (pa_ <= a1) & (pb_ >= b0) & (pb_ <= b1), t, np.inf)
        ok = np.isfinite(t)
        col = np.zeros((len(t), 3), np.float32)
        if ok.any():
            n = np.zeros(3)
            n[self.axis] = self.normal_sign
            shade = 0.55 + 0.45 * max(0.0, float(n @ _LIGHT))
            col[ok] = sample_texture(tex[self.texture], pa_[ok], pb_[ok], self.texels_per_m) * shade
        return t, col


@dataclass
class Box:
    """A box with half sizes `half`, rotated by `yaw` about z around `center`."""

    center: np.ndarray
    half: np.ndarray
    texture: str
    yaw: float = 0.0
    texels_per_m: float = 1200.0

    def _rot(self) -> np.ndarray:
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])  # box -> world

    def corners(self) -> np.ndarray:
        signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)
        return (signs * self.half) @ self._rot().T + self.center

    def hit(self, o: np.ndarray, d: np.ndarray, tex: dict) -> tuple[np.ndarray, np.ndarray]:
        Rb = self._rot()
        lo = Rb.T @ (o - self.center)  # ray in box coordinates
        ld = d @ Rb
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / ld
            t1 = (-self.half - lo) * inv
            t2 = (self.half - lo) * inv
        tmin = np.fmin(t1, t2)  # fmin/fmax skip the NaN of a ray parallel to a slab
        tmax = np.fmax(t1, t2)
        face = np.argmax(tmin, axis=1)
        tn = np.take_along_axis(tmin, face[:, None], 1)[:, 0]
        tf = tmax.min(axis=1)
        t = np.where((tn <= tf) & (tn > 1e-6), tn, np.inf)
        ok = np.isfinite(t)
        col = np.zeros((len(t), 3), np.float32)
        if ok.any():
            p = lo + t[ok, None] * ld[ok]
            f = face[ok]
            # texture coordinates: the two box axes other than the face normal
            ua = np.where(f == 0, p[:, 1], p[:, 0])
            va = np.where(f == 2, p[:, 1], p[:, 2])
            sign = -np.sign(ld[ok][np.arange(ok.sum()), f])
            nw = Rb[:, f].T * sign[:, None]  # world normals
            shade = 0.45 + 0.55 * np.clip(nw @ _LIGHT, 0, 1)
            col[ok] = sample_texture(tex[self.texture], ua + 3.0 * f, va, self.texels_per_m) * shade[:, None]
        return t, col


@dataclass
class Cylinder:
    """A vertical solid cylinder (the shallow bowl): side and top cap (darker, the inside)."""

    center: np.ndarray  # centre of the base
    radius: float
    height: float
    texture: str
    texels_per_m: float = 1200.0

    def corners(self) -> np.ndarray:
        r, h = self.radius, self.height
        signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (0, 1)], float)
        return signs * np.array([r, r, h]) + self.center

    def hit(self, o: np.ndarray, d: np.ndarray, tex: dict) -> tuple[np.ndarray, np.ndarray]:
        ox, oy = o[0] - self.center[0], o[1] - self.center[1]
        dx, dy = d[:, 0], d[:, 1]
        a = dx * dx + dy * dy
        b = 2 * (ox * dx + oy * dy)
        c = ox * ox + oy * oy - self.radius ** 2
        disc = b * b - 4 * a * c
        with np.errstate(invalid="ignore", divide="ignore"):
            ts = (-b - np.sqrt(disc)) / (2 * a)
        z = o[2] + ts * d[:, 2] - self.center[2]
        ts = np.where((disc >= 0) & (ts > 1e-6) & (z >= 0) & (z <= self.height), ts, np.inf)
        with np.errstate(invalid="ignore", divide="ignore"):
            tc = (self.center[2] + self.height - o[2]) / d[:, 2]
        cx = o[0] + tc * dx - self.center[0]
        cy = o[1] + tc * dy - self.center[1]
        tc = np.where(np.isfinite(tc) & (tc > 1e-6) & (cx * cx + cy * cy <= self.radius ** 2), tc, np.inf)
        t = np.minimum(ts, tc)
        col = np.zeros((len(t), 3), np.float32)
        side = np.isfinite(ts) & (ts <= tc)
        cap = np.isfinite(tc) & (tc < ts)
        if side.any():
            p = o + ts[side, None] * d[side]
            ang = np.arctan2(p[:, 1] - self.center[1], p[:, 0] - self.center[0]) * self.radius
            nrm = np.stack([p[:, 0] - self.center[0], p[:, 1] - self.center[1], np.zeros(side.sum())], 1) / self.radius
            shade = 0.45 + 0.55 * np.clip(nrm @ _LIGHT, 0, 1)
            col[side] = sample_texture(tex[self.texture], ang, p[:, 2], self.texels_per_m) * shade[:, None]
        if cap.any():
            p = o + tc[cap, None] * d[cap]
            col[cap] = sample_texture(tex[self.texture], p[:, 0], p[:, 1], self.texels_per_m) * 0.55
        return t, col


# ------------------------------------------------------------------------------------ rendering
_RAY_CACHE: dict[tuple, np.ndarray] = {}


def camera_rays(K: np.ndarray, h: int, w: int) -> np.ndarray:
    """Unnormalised camera-frame directions K^-1 [u, v, 1] for every pixel centre, (h*w, 3)."""
    key = (K.tobytes(), h, w)
    if key not in _RAY_CACHE:
        v, u = np.mgrid[0:h, 0:w].astype(np.float64)
        pix = np.stack([u.ravel(), v.ravel(), np.ones(h * w)], 1)
        _RAY_CACHE[key] = pix @ np.linalg.inv(K).T
    return _RAY_CACHE[key]


_EDGES = [(a, b) for a in range(8) for b in range(a + 1, 8) if bin(a ^ b).count("1") == 1]
_NEAR = 1e-3


def screen_box(cam: Camera, corners: np.ndarray) -> tuple[int, int, int, int] | None:
    """Pixel bounds (u0, v0, u1, v1) of a box's visible part, exact also when it crosses the
    camera plane (edges are clipped at the near plane), or None when it is off screen."""
    z = cam.depth(corners)
    if (z <= _NEAR).all():
        return None
    pts = [corners[z > _NEAR]]
    if (z <= _NEAR).any():
        cut = []
        for a, b in _EDGES:  # corners are ordered by sign bits, so edges differ in one bit
            if (z[a] > _NEAR) != (z[b] > _NEAR):
                t = (2 * _NEAR - z[a]) / (z[b] - z[a])  # a hair in front of the near plane
                cut.append(corners[a] + t * (corners[b] - corners[a]))
        pts.append(np.array(cut))
    uv = cam.project(np.concatenate(pts))
    uv = np.clip(uv, -1e6, 1e6)
    u0, v0 = np.floor(uv.min(0)).astype(int)
    u1, v1 = np.ceil(uv.max(0)).astype(int)
    u0, v0, u1, v1 = max(u0, 0), max(v0, 0), min(u1, cam.width - 1), min(v1, cam.height - 1)
    if u0 > u1 or v0 > v1:
        return None
    return u0, v0, u1, v1


def render(cam: Camera, prims: list, tex: dict, depth: np.ndarray | None = None,
            color: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ray-cast `prims` into (depth, color) buffers; each primitive only within its screen box."""
    h, w = cam.height, cam.width
    if depth is None:
        depth = np.full(h * w, np.inf)
        color = np.tile(np.array([[0.55, 0.62, 0.7]], np.float32), (h * w, 1))
    rays_c = camera_rays(cam.K, h, w)
    o = cam.center
    # unbounded planes (floor, wall) lie behind everything else: draw them last, only where
    # nothing closer was hit (most of a wrist view is table: this halves its cost)
    prims = sorted(prims, key=lambda p: isinstance(p, Plane) and p.bounds is None)
    for prim in prims:
        corners = prim.corners()
        if isinstance(prim, Plane) and prim.bounds is None:
            idx = np.flatnonzero(~np.isfinite(depth))
            if len(idx) == 0:
                continue
        elif corners is None:
            idx = None
        else:
            box = screen_box(cam, corners)
            if box is None:
                continue
            u0, v0, u1, v1 = box
            vv, uu = np.mgrid[v0:v1 + 1, u0:u1 + 1]
            idx = (vv * w + uu).ravel()
        d = (rays_c if idx is None else rays_c[idx]) @ cam.R  # world directions (R^T applied)
        t, col = prim.hit(o, d, tex)
        if idx is None:
            closer = t < depth
            depth[closer] = t[closer]
            color[closer] = col[closer]
        else:
            closer = t < depth[idx]
            depth[idx[closer]] = t[closer]
            color[idx[closer]] = col[closer]
    return depth, color
