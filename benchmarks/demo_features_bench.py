"""What the Sampson metric has to work with in the demo: features in real and generated views.

The Sampson error needs correspondences: SIFT matches between the two exterior views (cross-view,
at least `min_support` = 6 distinct ones over ±2 frames) and KLT tracks in the wrist view
(temporal, at least `min_inliers` = 15 per frame pair). This script counts them, so an empty
Sampson cell can be traced to its cause.

- `--scene`: the demo scene itself, rendered exactly (no codec, no model): SIFT matches between
  `exterior_1_left` and `exterior_2_left` per frame and how many lie within 2 px of the true
  cameras' F, per scene style and render size.
- `--run <demo out folder>`: per model of `<run>/generations` (and the real clips in
  `ground_truth`): median over frames of SIFT keypoints per exterior view, cross-view matches, and
  KLT tracks of the wrist view between consecutive frames.
- `--vae-fit <prepared dataset>`: how far a short reconstruction fit takes the tiny model's VAE
  (AutoencoderKLWan of `tiny-predict2.5`, one torch thread): L1 loss, seconds per step, PSNR of
  decode(encode(x)) on a held-out clip and SIFT keypoints in the reconstruction.

    .venv/bin/python benchmarks/demo_features_bench.py --scene
    .venv/bin/python benchmarks/demo_features_bench.py --run demo_out
    .venv/bin/python benchmarks/demo_features_bench.py --vae-fit demo_out/dataset --steps 300
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def scene(sizes: list[tuple[int, int]], frames: tuple[int, ...] = (0, 5)) -> list[dict]:
    from worldtune.eval.correspondences import SiftMatcher
    from worldtune.eval.epipolar import fundamental_from_cameras, sampson_distance
    from worldtune.scene.episode import SyntheticEpisode

    rows = []
    for style in ("demo", "hard"):
        for h, w in sizes:
            ep = SyntheticEpisode(10, max(frames) + 1, 0, h, w, style=style)
            m = SiftMatcher()
            for i in frames:
                views = ep.render(i)
                a, b = m.detect(views["exterior_1_left"]), m.detect(views["exterior_2_left"])
                x0, x1 = m.match(a, b)
                ca, cb = ep.camera("exterior_1_left", i), ep.camera("exterior_2_left", i)
                F = fundamental_from_cameras(ca.K, ca.R, ca.t, cb.K, cb.R, cb.t)
                d = sampson_distance(F, x0, x1) if len(x0) else np.empty(0)
                rows.append({"style": style, "size": f"{h}x{w}", "frame": i, "keypoints": [len(a.points), len(b.points)],
                             "matches": len(x0), "within_2px": int((d < 2).sum())})
    return rows


def run_folder(root: Path) -> list[dict]:
    from worldtune.eval.correspondences import SiftMatcher, track
    from worldtune.eval.sampson import split_views
    from worldtune.eval.video import read_video

    gen = root / "generations"
    layout = json.loads((gen / "info.json").read_text())["layout"]
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()]
    videos = [(r["model"], gen / r["video"]) for r in rows]
    videos += [("real", p) for p in sorted((gen / "ground_truth").glob("*.mp4"))]
    m = SiftMatcher()
    out = []
    for model, path in videos:
        views = split_views(read_video(str(path))[0], layout)
        e1, e2, wr = views["exterior_1"], views["exterior_2"], views["wrist"]
        kp, xv, klt = [], [], []
        for t in range(len(e1)):
            a, b = m.detect(e1[t]), m.detect(e2[t])
            kp.append((len(a.points) + len(b.points)) / 2)
            xv.append(len(m.match(a, b)[0]))
            if t + 1 < len(wr):
                klt.append(len(track(wr[t], wr[t + 1])[0]))
        out.append({"model": model, "video": path.name, "view": list(e1.shape[1:3]), "keypoints_median": float(np.median(kp)),
                    "crossview_matches_median": float(np.median(xv)), "crossview_matches_max": int(max(xv)),
                    "wrist_tracks_median": float(np.median(klt)), "wrist_tracks_max": int(max(klt))})
    return out


def vae_fit(dataset: Path, steps: int, crop: int = 64, batch: int = 4, lr: float = 3e-3) -> list[dict]:
    import time

    import torch

    from worldtune.eval.correspondences import SiftMatcher
    from worldtune.eval.video import read_video
    from worldtune.models.build import build_vae, seeded
    from worldtune.models.registry import get_spec

    torch.set_num_threads(1)  # two threads on a shared 2-core machine run ~30x slower
    clips = sorted((dataset / "clips").glob("*.mp4"))
    vids = [read_video(str(c))[0] for c in clips]
    train, test = vids[:-1], vids[-1]
    with seeded(0):
        vae = build_vae(get_spec("tiny-predict2.5"))

    def tensor(v: np.ndarray) -> torch.Tensor:  # T,H,W,3 uint8 -> 3,T,H,W in [-1, 1]
        return torch.from_numpy(np.ascontiguousarray(v)).permute(3, 0, 1, 2).float() / 127.5 - 1

    opt = torch.optim.AdamW(vae.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    out, t0 = [], time.time()
    for step in range(steps):
        xs = []
        for _ in range(batch):
            v = train[rng.integers(len(train))]
            t, y, x = rng.integers(len(v)), rng.integers(v.shape[1] - crop + 1), rng.integers(v.shape[2] - crop + 1)
            xs.append(tensor(v[t:t + 1, y:y + crop, x:x + crop]))
        x = torch.stack(xs)
        loss = (vae.decode(vae.encode(x).latent_dist.mode()).sample - x).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            out.append({"step": step, "l1": round(loss.item(), 4), "seconds": round(time.time() - t0, 1)})
    with torch.no_grad():
        x = tensor(test[:1])[None]
        rec = vae.decode(vae.encode(x).latent_dist.mode()).sample.clamp(-1, 1)
    psnr = 10 * np.log10(4 / float(((rec - x) ** 2).mean()))
    img = ((rec[0, :, 0].permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    m = SiftMatcher()
    out.append({"psnr_db": round(psnr, 2), "sift_keypoints_real": len(m.detect(test[0]).points),
                "sift_keypoints_reconstruction": len(m.detect(img).points)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", action="store_true", help="count matches in the rendered demo scene")
    ap.add_argument("--sizes", default="48x80,64x112,96x160,180x320", help="render sizes for --scene (HxW,...)")
    ap.add_argument("--run", type=Path, help="a `worldtune demo` output folder")
    ap.add_argument("--vae-fit", type=Path, help="a prepared dataset folder: fit the tiny VAE on its clips")
    ap.add_argument("--steps", type=int, default=300, help="steps of --vae-fit")
    args = ap.parse_args()
    if args.scene:
        for r in scene([tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]):  # type: ignore[misc]
            print(json.dumps(r))
    if args.run:
        for r in run_folder(args.run):
            print(json.dumps(r))
    if args.vae_fit:
        for r in vae_fit(args.vae_fit, args.steps):
            print(json.dumps(r))


if __name__ == "__main__":
    main()
