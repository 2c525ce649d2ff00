"""Pixel metrics speed: seconds per camera view of a 93-frame 180x320 clip, per metric group.

The real view is a crop of a smooth random texture that pans 2 px per frame with a square moving
across it; the generated view is the real one with noise and a drifting 1-px offset. Times are
medians over --repeats runs (OpenCV uses all cores for some steps). "Cheap" metrics = grey +
psnr + ssim + dynamic_psnr + motion_iou; the flow-warping error runs DIS once per frame pair
and per clip (generated and real).

    .venv/bin/python benchmarks/pixel_metrics_bench.py --repeats 5
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np

from worldtune.eval import pixels


def make_views(frames: int = 93, h: int = 180, w: int = 320, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    canvas = rng.integers(0, 256, (h + frames, w + 2 * frames, 3), dtype=np.uint8)
    canvas = cv2.normalize(cv2.GaussianBlur(canvas, (0, 0), 3.0), None, 0, 255, cv2.NORM_MINMAX)
    real = np.stack([canvas[t // 2: t // 2 + h, 2 * t: 2 * t + w] for t in range(frames)])
    for t in range(frames):
        real[t, 60:100, 10 + 3 * t: 50 + 3 * t] = (220, 40, 40)
    noisy = real.astype(np.int16) + rng.integers(-6, 7, real.shape)
    gen = np.clip(np.roll(noisy, 1, axis=2), 0, 255).astype(np.uint8)
    return gen, real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    gen, real = make_views()

    grey_gen, grey_real = pixels.grey_clip(gen), pixels.grey_clip(real)
    groups = {
        "grey (both clips)": lambda: (pixels.grey_clip(gen), pixels.grey_clip(real)),
        "psnr": lambda: pixels.psnr_curve(gen[1:], real[1:]),
        "ssim (luma)": lambda: pixels.ssim_curve(grey_gen[1:], grey_real[1:]),
        "dynamic_psnr": lambda: pixels.dynamic_psnr(gen, real),
        "motion_iou": lambda: pixels.motion_iou(pixels.motion_masks(grey_gen), pixels.motion_masks(grey_real)),
        "warp_error (one clip, DIS FAST)": lambda: pixels.flow_warping_error(gen, grey_gen),
        "pixel_metrics (all, incl. real warp)": lambda: pixels.pixel_metrics(gen, real),
    }
    print(f"clip {gen.shape}, OpenCV {cv2.__version__}, {cv2.getNumThreads()} threads, median of {args.repeats}")
    for name, fn in groups.items():
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print(f"{name:40s} {np.median(times):6.3f} s/view")
    values = pixels.pixel_metrics(gen, real).values
    print("values:", {k: round(v, 3) for k, v in values.items()})


if __name__ == "__main__":
    main()
