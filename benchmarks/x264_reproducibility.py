"""Does one x264 thread give the same bytes every time, and what does turning the macroblock tree off cost?

x264's macroblock tree reads memory it never wrote, so the same frames encoded with one thread can
come out as different bytes; `VideoWriter` therefore turns it off whenever one thread is asked for.
This script measures both sides of that choice:

- repeats: the same 9-frame 240x432 clip encoded `--repeats` times in this process, each encode
  after a decode of another video (as prepare does), counting distinct outputs with the macroblock
  tree on and off; then once more in a child process whose new memory glibc fills with 0xfe
  (MALLOC_PERTURB_=1), compared with a plain child.
- cost: bytes and PSNR at crf 18, preset medium, of each `--clips` video (default: the demo's
  LeRobot cameras, `make demo` writes them), first 93 frames, with the macroblock tree on and off.

    python benchmarks/x264_reproducibility.py --json benchmarks/results/x264_reproducibility.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from worldtune.data.video import REPRODUCIBLE_X264, VideoWriter, read_frames, write_video
from worldtune.eval.pixels import psnr_from_mse

DEMO = Path("demo_out/lerobot/videos")


def clip(n: int = 9) -> list[np.ndarray]:
    """A hard-to-code noise texture sliding 3 px a frame, 240x432 (tall enough for x264's edge cases)."""
    tex = np.random.default_rng(0).integers(0, 256, (240, 432 + 3 * n, 3), np.uint8)
    return [np.roll(tex, 3 * t, axis=1)[:, :432] for t in range(n)]


def encode(path: Path, frames: list[np.ndarray], params: str, fps: float = 16, crf: int = 18) -> str:
    """One-thread encode; `params` are x264-params given on top (mbtree=1 turns the tree back on)."""
    with VideoWriter(path, fps, crf=crf, preset="medium", threads=1, options={"x264-params": params}) as w:
        for f in frames:
            w.write(f)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def repeats(n: int, tmp: Path) -> dict:
    frames, other = clip(), tmp / "other.mp4"
    write_video(other, clip(12), fps=16)
    out = {}
    for name, params in (("mbtree_on", "mbtree=1"), ("mbtree_off", REPRODUCIBLE_X264)):
        seen: Counter = Counter()
        for i in range(n):
            read_frames(other, list(range(12)), pixel_format="yuv420p", threads=1)
            seen[encode(tmp / "a.mp4", frames, params)] += 1
        out[name] = {"encodes": n, "distinct": len(seen), "differing_from_commonest": n - max(seen.values())}
        print(name, out[name], flush=True)
    return out


def perturbed(tmp: Path) -> dict:
    """The same encode in two child processes, one with glibc filling new memory with 0xfe."""
    code = ("import sys; sys.path.insert(0, sys.argv[3]); import x264_reproducibility as b; "
            "print(b.encode(__import__('pathlib').Path(sys.argv[1]), b.clip(5), sys.argv[2]))")
    out = {}
    for name, params in (("mbtree_on", "mbtree=1"), ("mbtree_off", REPRODUCIBLE_X264)):
        digests = []
        for perturb in (None, "1"):
            env = {k: v for k, v in os.environ.items() if k != "MALLOC_PERTURB_"}
            env.update({"MALLOC_PERTURB_": perturb} if perturb else {})
            res = subprocess.run([sys.executable, "-c", code, str(tmp / "p.mp4"), params, str(Path(__file__).parent)],
                                 env=env, check=True, capture_output=True, text=True)
            digests.append(res.stdout.strip())
        out[name] = {"same_bytes": digests[0] == digests[1]}
        print("MALLOC_PERTURB_=1", name, out[name], flush=True)
    return out


def cost(paths: list[Path], tmp: Path) -> list[dict]:
    rows = []
    for src in paths:
        ref = read_frames(src, list(range(93)))
        row: dict = {"clip": str(src), "frames": len(ref), "size": list(ref.shape[1:3])}
        for name, params in (("mbtree_on", "mbtree=1"), ("mbtree_off", REPRODUCIBLE_X264)):
            p = tmp / "c.mp4"
            encode(p, list(ref), params, fps=15)
            mse = float(((read_frames(p).astype(np.float64) - ref) ** 2).mean())
            row[name] = {"kB": round(p.stat().st_size / 1000, 1), "psnr_db": round(float(psnr_from_mse(mse)), 2)}
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=200, help="encodes of the clip per setting")
    p.add_argument("--clips", nargs="*", type=Path, default=sorted(DEMO.glob("*/chunk-000/file-000.mp4")),
                   help="videos to measure the cost on (default: the demo's LeRobot cameras)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        result = {"repeats": repeats(args.repeats, tmp), "perturbed": perturbed(tmp), "cost": cost(args.clips, tmp)}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
