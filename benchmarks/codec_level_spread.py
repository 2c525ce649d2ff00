"""How far a one-level difference in a few values of a clip spreads once both clips go through worldtune's writer.

Why: on the CPU worldtune's VAE (oneDNN 3-D convolutions) and a plain diffusers pipeline's (PyTorch's kernel choice)
round differently, so their uint8 frames can differ by one level in a few values. A check that compares the two
*after the codec* (an mp4 from `worldtune generate`, a served chunk read back from its recording) sees more: x264
decides its blocks' modes and quantisation from the pixels, and one level can flip a decision that moves a whole
block. This script measures that spread on the project's scene: per trial, `--values` values of the clip (random
frame, pixel and channel) raised by one level, both clips encoded with `write_video` (libx264, CRF `--crf`, one
thread), decoded, and compared.

    PYTHONPATH=src .venv/bin/python benchmarks/codec_level_spread.py --json benchmarks/results/codec_level_spread.json

Prints and writes, per size: the trials, how many came out identical after the codec, and over the others the
largest level difference and the number of values that differ.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from worldtune.data.video import read_frames, write_video
from worldtune.scene.episode import SyntheticEpisode, camera_name


def scene_clip(height: int, width: int, frames: int, role: str = "exterior_1") -> np.ndarray:
    """The demo scene's first episode, one camera, `frames` frames of `height`x`width` ([T,H,W,3] uint8)."""
    ep = SyntheticEpisode(0, frames, 0, height, width)
    return np.stack([ep.render(i)[camera_name(role)] for i in range(frames)])


def nudge(clip: np.ndarray, values: int, rng: np.random.Generator) -> np.ndarray:
    """`clip` with `values` random values moved by one level (up, or down where the value is 255)."""
    out = clip.copy()
    for t, y, x, c in zip(*(rng.integers(0, n, values) for n in clip.shape)):
        out[t, y, x, c] = out[t, y, x, c] + 1 if out[t, y, x, c] < 255 else 254
    return out


def after_codec(clip: np.ndarray, path: Path, crf: int) -> np.ndarray:
    """`clip` as read back from worldtune's writer (libx264, one thread: the same bytes every time)."""
    write_video(path, clip, fps=16, crf=crf, threads=1)
    return read_frames(path)


def spread(clip: np.ndarray, trials: int, values: int, crf: int, seed: int = 0) -> dict:
    """Per trial: the largest level difference after the codec and how many values differ."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        base = after_codec(clip, Path(tmp) / "a.mp4", crf)
        rows = []
        for _ in range(trials):
            other = after_codec(nudge(clip, values, rng), Path(tmp) / "b.mp4", crf)
            diff = np.abs(base.astype(np.int16) - other.astype(np.int16))
            rows.append({"max_levels": int(diff.max()), "values_differing": int((diff > 0).sum())})
    moved = [r for r in rows if r["max_levels"] > 0]
    return {"trials": trials, "identical": trials - len(moved),
            "max_levels_range": [min((r["max_levels"] for r in moved), default=0),
                                 max((r["max_levels"] for r in moved), default=0)],
            "values_differing_range": [min((r["values_differing"] for r in moved), default=0),
                                       max((r["values_differing"] for r in moved), default=0)],
            "values_in_clip": int(clip.size), "per_trial": rows}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="96x160,176x320", help="HxW of the scene's clip, comma-separated")
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--values", default="1,4,32", help="values nudged by one level per trial, comma-separated")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--crf", type=int, default=18)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    t0 = time.time()
    results = {}
    for size in args.sizes.split(","):
        h, w = (int(v) for v in size.split("x"))
        clip = scene_clip(h, w, args.frames)
        for values in (int(v) for v in args.values.split(",")):
            r = results[f"{size}, {values} values"] = spread(clip, args.trials, values, args.crf)
            _say(f"{size}, {values} values nudged", r)
    out = {"settings": vars(args) | {"json": str(args.json)}, "machine": platform.processor() or platform.machine(),
           "seconds": round(time.time() - t0, 1), "cases": results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


def _say(case: str, r: dict) -> None:
    """One line per case: how many trials the codec absorbed, and how far the others moved."""
    (lo, hi), (few, many) = r["max_levels_range"], r["values_differing_range"]
    print(f"{case}: {r['identical']}/{r['trials']} identical after the codec; the others differ by up to {lo}-{hi} "
          f"levels in {few}-{many} of {r['values_in_clip']} values", flush=True)


if __name__ == "__main__":
    main()
