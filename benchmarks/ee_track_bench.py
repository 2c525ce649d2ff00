"""How well the end-effector detector reads the synthetic scene's gripper: its floor, and what a wrong track scores.

On the seed models' scene (the held-out green task, `motion = "varied"`, 180x320 cameras prepared into 128x224 grid
clips of 17 frames, 64x112 per view, as `worldtune demo` makes them), for every clip and exterior view, the track
error (worldtune.eval.end_effector, median px over the frames after the first) of:

- the real clip (the detector's own error);
- the real clip through each seed model's VAE (decode(encode(clip)): the `vae_round_trip` baseline, the most a
  generated video can reach through that VAE);
- another episode's real clip (a wrong track: what the figure must read as far off);
- the first frame held (what doing nothing scores).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ee_track_bench.py --out /tmp/ee_bench
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ee_track_bench.py --out /tmp/ee_bench_hard --style hard --models
Writes benchmarks/results/ee_track_bench.json (ee_track_bench_hard.json). About 2 min on one CPU core (most of it
the two VAEs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def dataset(out: Path, episodes: int, style: str) -> Path:
    from worldtune.config import PrepareConfig
    from worldtune.data import prepare
    from worldtune.scene.writer import write_demo_dataset

    if not (out / "dataset" / "manifest.parquet").is_file():
        write_demo_dataset(out / "lerobot", episodes=episodes, height=180, width=320, targets=("green",),
                           motion="varied", place_on="blue", workers=1, length=28, style=style)
        prepare.run(PrepareConfig(source=str(out / "lerobot"), out=str(out / "dataset"), height=128, width=224,
                                  workers=1, val_fraction=0.5), quiet=True)
    return out / "dataset"


def round_trips(ds: Path, clips: list[str], model: str) -> dict[str, np.ndarray]:
    import torch

    from worldtune.eval.video import read_video
    from worldtune.infer.baselines import vae_round_trip
    from worldtune.models.load import load_pipeline

    torch.set_num_threads(1)
    pipe, _ = load_pipeline(model, dtype="fp32", device="cpu")
    return {c: vae_round_trip(pipe.vae, read_video(ds / "clips" / f"{c}.mp4")[0]) for c in clips}


def main() -> None:
    from worldtune.eval import end_effector as ee
    from worldtune.eval.sampson import split_views
    from worldtune.eval.video import read_video

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/ee_bench"))
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--models", nargs="*", default=["seed-predict2.5", "seed-cosmos3"])
    ap.add_argument("--style", choices=["demo", "hard"], default="demo", help="the scene: the seeds' (demo) or the "
                    "plain, wide-baseline one with cameras re-placed per episode (hard)")
    args = ap.parse_args()
    t0 = time.time()
    ds = dataset(args.out, args.episodes, args.style)
    layout = json.loads((ds / "info.json").read_text())["layout"]
    truth = ee.TrackTruth.load(ds)
    assert not isinstance(truth, str), truth
    clips = sorted(truth.cal.clips)
    real = {c: split_views(read_video(ds / "clips" / f"{c}.mp4")[0], layout) for c in clips}
    vae = {m: {c: split_views(v, layout) for c, v in round_trips(ds, clips, m).items()} for m in args.models}
    errors: dict[str, list[float]] = {}
    for i, c in enumerate(clips):
        other = real[clips[(i + 1) % len(clips)]]
        for role, t in truth.views(c).items():
            plate = ee.plate(real[c][role], t)
            kinds = {"real": real[c][role], "another_episode": other[role],
                     "first_frame": np.repeat(real[c][role][:1], len(real[c][role]), 0),
                     **{f"vae_round_trip:{m}": vae[m][c][role] for m in args.models}}
            for kind, frames in kinds.items():
                s = ee.score_view(frames, plate, t)
                if s.error is not None:
                    errors.setdefault(kind, []).append(s.error)
    summary = {k: {"median_px": round(float(np.median(v)), 2), "mean_px": round(float(np.mean(v)), 2), "n": len(v)}
               for k, v in errors.items()}
    result = {"clips": len(clips), "style": args.style, "view": "64x112", "seconds": round(time.time() - t0, 1),
              "figures": summary}
    print(json.dumps(result, indent=1))
    path = Path(__file__).parent / "results" / ("ee_track_bench.json" if args.style == "demo" else
                                                f"ee_track_bench_{args.style}.json")
    path.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
