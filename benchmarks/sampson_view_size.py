"""Whether a clip's fixed camera pair allows the whole-frame cross-view Sampson error at all.

The whole-frame cross-view figure measures SIFT matches between two fixed cameras under the rig's F, keeping those
within `gate` px of it. That only means something when the matches that pass are better than chance: a pixel pair
drawn at random also falls within `gate` px of its epipolar line with some probability, which grows as the views get
smaller (the gate is a fixed number of pixels). This script reads the real clips of a `worldtune demo` (or any
generation folder with `ground_truth/` and the calibrated dataset it came from) and reports, per SIFT setting, how
many mutual matches the fixed pair has per frame, the share within the gate, and the share of random pixel pairs
within the gate under the same F. Matches whose share is near the random one carry no geometry.

    python benchmarks/sampson_view_size.py --demo demo_out --json benchmarks/results/sampson_view_size.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from worldtune.eval.correspondences import SiftMatcher
from worldtune.eval.epipolar import sampson_distance
from worldtune.eval.rig import Calibration, calibrated_reference, pair_key
from worldtune.eval.sampson import CONTRAST, SampsonConfig, split_views
from worldtune.eval.video import read_video

# (ratio, detection scale, contrast threshold): the metric's scoring default, its fallback, and looser ones
SETTINGS = {"scoring (default)": (0.75, 1.0, CONTRAST), "fallback contrast 0.02": (0.75, 1.0, 0.02),
            "contrast 0.01": (0.75, 1.0, 0.01), "2x scale, contrast 0.01": (0.75, 2.0, 0.01),
            "ratio 0.85, contrast 0.01": (0.85, 1.0, 0.01), "2x, ratio 0.85, contrast 0.005": (0.85, 2.0, 0.005)}


def chance_share(F: np.ndarray, size_a: tuple[int, int], size_b: tuple[int, int], gate: float, n: int = 20000,
                 seed: int = 0) -> float:
    """Share of uniformly drawn pixel pairs within `gate` px of F (Sampson distance)."""
    rng = np.random.default_rng(seed)
    (ha, wa), (hb, wb) = size_a, size_b
    x0 = np.c_[rng.uniform(0, wa, n), rng.uniform(0, ha, n)]
    x1 = np.c_[rng.uniform(0, wb, n), rng.uniform(0, hb, n)]
    return float((sampson_distance(F, x0, x1) <= gate).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="demo_out", help="a worldtune demo output folder")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    demo = Path(args.demo)
    gen = demo / "generations"
    if not (gen / "info.json").is_file() or not (demo / "dataset").is_dir():
        raise SystemExit(f"{demo}: no generations/info.json or dataset/ here; run `worldtune demo` first, or point "
                         "--demo at its output folder")
    layout = json.loads((gen / "info.json").read_text())["layout"]
    cal = Calibration.load(demo / "dataset")
    gate = SampsonConfig().gate
    matchers = {k: SiftMatcher(2000, r, s, c) for k, (r, s, c) in SETTINGS.items()}
    counts = {k: {"matches": 0, "within_gate": 0} for k in SETTINGS}
    chances, frames, clips = [], 0, 0
    t0 = time.perf_counter()
    for clip in sorted((gen / "ground_truth").glob("*.mp4")):
        views = split_views(read_video(str(clip))[0], layout)
        ref = calibrated_reference(cal, clip.stem, sorted(views))
        a, b = sorted(r for r in views if r not in ref.moving)[:2]
        ref = ref.for_size({r: v.shape[1:3] for r, v in views.items()})
        F = ref.pairs[pair_key(a, b)].F
        if F is None:
            continue
        size = views[a].shape[1:3]
        chances.append(chance_share(F, size, views[b].shape[1:3], gate))
        clips += 1
        frames += len(views[a])
        for k, m in matchers.items():
            for t in range(len(views[a])):
                x0, x1 = m.match(m.detect(views[a][t]), m.detect(views[b][t]))
                d = sampson_distance(F, x0, x1)
                counts[k]["matches"] += len(d)
                counts[k]["within_gate"] += int((d <= gate).sum())
    if not clips:
        raise SystemExit(f"{gen / 'ground_truth'}: no real clip with a calibrated fixed camera pair; run `worldtune demo` "
                         "first, or point --demo at its output folder")
    rows = {k: {**c, "per_frame": round(c["matches"] / max(frames, 1), 2),
                "share_within_gate": round(c["within_gate"] / c["matches"], 3) if c["matches"] else None}
            for k, c in counts.items()}
    out = {"demo": str(demo), "pair": f"{a}|{b}", "view_hw": list(size), "gate_px": gate,
           "clips": clips, "frames": frames, "random_pairs_within_gate": round(float(np.mean(chances)), 3),
           "settings": rows, "seconds": round(time.perf_counter() - t0, 1), "machine": platform.processor() or
           platform.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"{clips} clips, {frames} frames of {out['pair']} at {size}; random pixel pairs within {gate:g} px: "
          f"{out['random_pairs_within_gate']:.1%}")
    for k, r in rows.items():
        share = "-" if r["share_within_gate"] is None else f"{r['share_within_gate']:.1%}"
        print(f"  {k:32s} {r['matches']:5d} matches ({r['per_frame']:.2f} per frame), within the gate {share}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
