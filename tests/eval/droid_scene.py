"""A second validation scene for the Sampson metric, built apart from the demo scene and not tuned to it.

What real robot footage does to a geometry metric, with every camera known exactly:
- DROID-size 180x320 views, encoded as LeRobot writes them (AV1 through SVT-AV1, CRF 30, GOP 2) or H.264;
- one rig for every episode (the same fixed cameras) while the objects and the arm's path change:
  another episode's view is the right camera with things in the wrong place;
- three fixed cameras: a pair ~30° apart and a wide pair >= 75° apart over a plain, low-texture table
  before a wall of fine wallpaper (small dots that half-size detection blurs into look-alikes);
- a wrist camera on the gripper (palm and fingers always in view) that moves slowly or fast; or
  (`wrist_down`) one looking down at the plain table from above the fingers, only the two fingertips
  in view and nothing carried, as on a pick-up task seen from the hand;
- a plane-dominated variant (`poster_only`): only a poster on the wall has texture, so the matches of
  the two views lie on one plane and do not fix F (a family of F fits them exactly).

Rendered with worldtune.scene.raycast's ray caster (one ray per pixel centre): every pixel is an exact
pinhole projection, so the true F of any two views is `fundamental_from_cameras` of their cameras.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction

import cv2
import numpy as np

from worldtune.eval.epipolar import fundamental_from_cameras
from worldtune.scene.episode import _make_textures, _noise
from worldtune.scene.raycast import Box, Camera, Cylinder, Plane, intrinsics, look_at, render

H, W = 180, 320
FIXED = ("ext_a", "ext_b", "ext_c")  # ext_a|ext_b ~30° apart, ext_a|ext_c >= 75° apart
NARROW, WIDE = "ext_a|ext_b", "ext_a|ext_c"
TARGET = np.array([0.0, 0.12, 0.06])
# azimuth around the table (0 = straight in front), elevation, distance: one rig for every episode
RIG = {"ext_a": (-42.0, 34.0, 0.95), "ext_b": (-6.0, 30.0, 1.0), "ext_c": (70.0, 48.0, 0.85)}


def _textures(seed: int, poster_only: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 11])
    tex = dict(_make_textures(100 + seed, style="hard"))  # plain table, striped blocks and arm
    size = 256
    if poster_only:
        wall = np.full((size, size, 3), 0.78, np.float32)
    else:  # fine wallpaper: dots of 1-2 texels (~2 px in the views) on a faint cloud
        wall = np.stack([0.55 + 0.15 * _noise(rng, size, (4, 8))] * 3, -1).astype(np.float32)
        for _ in range(2500):
            p = tuple(int(v) for v in rng.integers(0, size, 2))
            cv2.circle(wall, p, int(rng.integers(1, 3)), tuple(float(v) for v in rng.random(3)), -1)
    tex["wall"] = wall
    poster = np.stack([_noise(rng, size, (8, 16, 32, 64))] * 3, -1).astype(np.float32) * 0.5 + 0.25
    for _ in range(60):
        p = tuple(int(v) for v in rng.integers(0, size, 2))
        c = tuple(float(v) for v in rng.random(3))
        if rng.random() < 0.5:
            cv2.circle(poster, p, int(rng.integers(4, 16)), c, -1)
        else:
            cv2.rectangle(poster, p, tuple(int(v) for v in np.clip(np.array(p) + rng.integers(-24, 24, 2), 0, size - 1)), c, -1)
    tex["poster"] = poster
    tex["floor"] = np.full((size, size, 3), 0.35, np.float32) if poster_only else tex["floor"]
    return tex


@dataclass
class DroidEpisode:
    """One episode of the fixed rig: objects placed by `index`, the gripper moving at `speed` m/frame."""

    index: int
    length: int = 32
    speed: float = 0.012  # gripper path speed, metres per frame (fast; 0.0012 is slow)
    poster_only: bool = False
    wrist_down: bool = False  # the wrist looks down at the plain table; only the fingers ride in view
    width: int = W
    height: int = H
    objects: dict[str, np.ndarray] = field(default_factory=dict)
    _static_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng([2026, self.index])
        self.tex = _textures(0, self.poster_only)
        self.K_ext = intrinsics(self.width, self.height, 60.0)
        self.K_wrist = intrinsics(self.width, self.height, 88.0)
        names = ["red", "blue", "green", "bowl"]
        slots = [np.array([x, y]) for x in (-0.28, -0.1, 0.1, 0.28) for y in (-0.05, 0.2)]
        order = rng.permutation(len(slots))
        for k, n in enumerate(names):
            xy = slots[order[k]] + rng.uniform(-0.03, 0.03, 2)
            self.objects[n] = np.array([xy[0], xy[1], 0.0])
        self.yaw = {n: float(rng.uniform(-0.7, 0.7)) for n in names}
        # the gripper's path: a smooth loop over the table, another start and phase per episode
        self.path_center = np.array([rng.uniform(-0.08, 0.08), rng.uniform(0.05, 0.15), 0.2])
        self.phase = float(rng.uniform(0, 2 * np.pi))

    # ------------------------------------------------------------------------------- cameras
    def gripper(self, i: int) -> tuple[np.ndarray, float]:
        """Gripper position (bottom of the fingers) and yaw at frame i: a loop of radius 0.15 m."""
        s = self.phase + self.speed * i / 0.15
        g = self.path_center + np.array([0.15 * math.cos(s), 0.08 * math.sin(s), 0.04 * math.sin(2 * s)])
        return g, 0.4 * math.sin(s)

    def camera(self, role: str, i: int = 0) -> Camera:
        if role in RIG:
            az, el, dist = math.radians(RIG[role][0]), math.radians(RIG[role][1]), RIG[role][2]
            eye = TARGET + dist * np.array([math.sin(az) * math.cos(el), -math.cos(az) * math.cos(el), math.sin(el)])
            R, t = look_at(eye, TARGET)
            return Camera(self.K_ext, R, t, self.width, self.height)
        g, yaw = self.gripper(i)
        c, s = math.cos(yaw), math.sin(yaw)
        rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
        eye, target = (((0.0, -0.05, 0.12), (0.0, 0.1, -0.3)) if self.wrist_down else
                       ((0.0, -0.1, 0.08), (0.0, 0.14, -0.15)))
        R, t = look_at(g + rot @ np.array(eye), g + rot @ np.array(target))
        return Camera(self.K_wrist, R, t, self.width, self.height)

    def F(self, a: str, b: str, i: int = 0, j: int | None = None) -> np.ndarray:
        """The true F (x_a ᵀ F x_b = 0) of view a at frame i and view b at frame j (default i)."""
        ca, cb = self.camera(a, i), self.camera(b, i if j is None else j)
        return fundamental_from_cameras(ca.K, ca.R, ca.t, cb.K, cb.R, cb.t)

    # --------------------------------------------------------------------------------- scene
    def _static(self) -> list:
        wall = [Plane(1, 0.75, "wall", -1.0, ((-3.0, 3.0), (-0.7, 3.0)), 350.0),
                Plane(1, 0.749, "poster", -1.0, ((-0.45, 0.35), (0.0, 0.4)), 420.0)]
        prims = [Plane(2, 0.0, "table", 1.0, ((-0.6, 0.6), (-0.35, 0.55)), 500.0), Plane(2, -0.7, "floor", 1.0, None, 250.0),
                 *wall, Cylinder(self.objects["bowl"], 0.07, 0.035, "bowl")]
        if not self.poster_only:
            prims += [Box(self.objects[n] + np.array([0, 0, 0.03]), np.array([0.03, 0.03, 0.03]), n, self.yaw[n])
                      for n in ("red", "blue")]
        return prims

    def _moving(self, i: int) -> list:
        g, yaw = self.gripper(i)
        c, s = math.cos(yaw), math.sin(yaw)
        fingers = [Box(g + np.array([sgn * 0.036 * c, sgn * 0.036 * s, 0.025]), np.array([0.006, 0.018, 0.025]), "arm", yaw)
                   for sgn in (-1, 1)]
        if self.wrist_down:  # the hand seen from its own camera: the fingers, nothing else
            return fingers
        prims = [Box(g + np.array([0, 0, 0.062]), np.array([0.055, 0.025, 0.012]), "arm", yaw), *fingers]
        prims.append(Box(g + np.array([0, 0, 0.42]), np.array([0.022, 0.022, 0.346]), "arm", yaw))  # the column
        if not self.poster_only:  # the block it carries
            prims.append(Box(g + np.array([0, 0, 0.02]), np.full(3, 0.02), "green", yaw))
        return prims

    def render_view(self, role: str, i: int, shift: tuple[float, float] = (0.0, 0.0),
                    moving_shift: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
        """HxWx3 uint8 view of `role` at frame i; `shift` (dx, dy) px moves the whole image exactly
        (the principal point moves: no resampling blur that would change what a detector finds);
        `moving_shift` moves only what moves (arm, carried block) over the unmoved background."""
        cam = self.camera(role, i)
        if shift != (0.0, 0.0):
            cam = Camera(cam.K + np.array([[0, 0, shift[0]], [0, 0, shift[1]], [0, 0, 0]]), cam.R, cam.t, cam.width, cam.height)
            depth, color = render(cam, self._static(), self.tex)
        elif role in RIG:
            if role not in self._static_cache:
                self._static_cache[role] = render(cam, self._static(), self.tex)
            depth, color = (a.copy() for a in self._static_cache[role])
        else:
            depth, color = render(cam, self._static(), self.tex)
        if moving_shift != (0.0, 0.0):
            cam = Camera(cam.K + np.array([[0, 0, moving_shift[0]], [0, 0, moving_shift[1]], [0, 0, 0]]), cam.R, cam.t,
                         cam.width, cam.height)
        render(cam, self._moving(i), self.tex, depth, color)
        return (np.clip(color, 0, 1) * 255 + 0.5).astype(np.uint8).reshape(cam.height, cam.width, 3)

    def gripper_mask(self, i: int) -> np.ndarray:
        """(H, W) bool: the wrist view's pixels on the arm (palm, fingers, column, carried block)."""
        depth, _ = render(self.camera("wrist", i), self._moving(i), self.tex)
        return np.isfinite(depth).reshape(self.height, self.width)

    def views(self, roles=FIXED + ("wrist",)) -> dict[str, np.ndarray]:
        return {r: np.stack([self.render_view(r, i) for i in range(self.length)]) for r in roles}


def angle_between(ep: DroidEpisode, a: str, b: str) -> float:
    """Degrees between the two cameras' rays to the table centre."""
    ra, rb = (TARGET - ep.camera(r).center for r in (a, b))
    return float(np.degrees(np.arccos(ra @ rb / np.linalg.norm(ra) / np.linalg.norm(rb))))


# ------------------------------------------------------------------------------------- codecs
def av1_available() -> bool:
    import av

    try:
        av.codec.Codec("libsvtav1", "w")
        return True
    except Exception:  # noqa: BLE001 - a PyAV build without SVT-AV1
        return False


def encode(frames: np.ndarray, codec: str = "av1", crf: int | None = None, fps: int = 15) -> np.ndarray:
    """Frames through a real encode and decode: "av1" as LeRobot writes videos (SVT-AV1, CRF 30, a
    keyframe every 2 frames; H.264 when this PyAV has no SVT-AV1) or "h264" (libx264, CRF 23)."""
    import av

    if codec == "av1" and not av1_available():
        codec = "h264"
    name, opts = (("libsvtav1", {"crf": str(crf or 30), "g": "2", "preset": "10"}) if codec == "av1" else
                  ("libx264", {"crf": str(crf or 23), "preset": "veryfast"}))
    os.environ.setdefault("SVT_LOG", "1")  # errors only
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        s = out.add_stream(name, rate=Fraction(fps))
        s.width, s.height, s.pix_fmt, s.options = frames.shape[2], frames.shape[1], "yuv420p", opts
        for f in frames:
            out.mux(s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")))
        out.mux(s.encode())
    with av.open(io.BytesIO(buf.getvalue())) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def distance_to_truth(F: np.ndarray, F_true: np.ndarray, size=(H, W), n: int = 2000) -> float:
    """Median Sampson distance under F of correspondences that are exact under F_true, spread over both
    images (points of view a, each paired with a point of its true epipolar line inside view b)."""
    from worldtune.eval.epipolar import sampson_distance

    h, w = size
    rng = np.random.default_rng(0)
    x0 = rng.random((n, 2)) * [w - 1, h - 1]
    lines = np.c_[x0, np.ones(n)] @ F_true  # x0ᵀ F_true: the line in view b
    xs = rng.random(n) * (w - 1)
    ys = -(lines[:, 0] * xs + lines[:, 2]) / lines[:, 1]
    ok = (ys >= 0) & (ys <= h - 1)
    return float(np.median(sampson_distance(F, x0[ok], np.c_[xs, ys][ok])))
