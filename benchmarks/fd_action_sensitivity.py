"""Can the tiny Cosmos 3 be shown to use its actions? Three measurements on the demo robot, tiny-cosmos3, CPU.

1. **Oracle through the tiny VAE.** For held-out-sized clips of one camera (64x112, 17 frames) of the demo
   scene: the best any dynamics model can do is to reproduce the clip's own latents, so decode(encode(clip))
   is the "perfect model under its own actions", and decode(encode(first frame + another episode's frames))
   the perfect model under another episode's actions. Their dynamic PSNR against the real clip bounds every
   action-sensitivity figure measured through this VAE.
2. **What the latents hold.** Variance of the normalised latents, and the between-clip variance of the
   future latent frames (what actions could explain) in the forward-dynamics cache.
3. **Training.** A short forward-dynamics LoRA run (`train.task = "forward_dynamics"`); at intervals the
   held-out flow-matching loss at fixed noise with each clip's own actions and with another clip's.

    .venv/bin/python benchmarks/fd_action_sensitivity.py --out /tmp/fd_sens --steps 150
Writes benchmarks/results/fd_action_sensitivity.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch


def oracle(root: Path, model: Path) -> dict:
    import cv2
    from diffusers import AutoencoderKLWan

    from worldtune.data.lerobot import LeRobotDataset
    from worldtune.eval.pixels import pixel_metrics

    vae = AutoencoderKLWan.from_pretrained(model, subfolder="vae")
    ds = LeRobotDataset(root)
    clips = []
    for ep in ds.episodes:
        fr = ds.episode_frames(ep, "observation.images.exterior_1_left")
        if len(fr) >= 17:
            clips.append(np.stack([cv2.resize(f, (112, 64), interpolation=cv2.INTER_AREA) for f in fr[:17]]))

    def round_trip(fr: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(fr).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
        with torch.no_grad():
            y = vae.decode(vae.encode(x).latent_dist.mode()).sample
        return ((y[0].permute(1, 2, 3, 0).clamp(-1, 1) + 1) * 127.5).round().byte().numpy()

    own, other, raw_other = [], [], []
    for i, c in enumerate(clips):
        swapped = np.concatenate([c[:1], clips[(i + 1) % len(clips)][1:]])
        own.append(pixel_metrics(round_trip(c), c).values["dynamic_psnr"])
        other.append(pixel_metrics(round_trip(swapped), c).values["dynamic_psnr"])
        raw_other.append(pixel_metrics(swapped, c).values["dynamic_psnr"])
    return {"clips": len(clips), "vae_own_dynamic_psnr": float(np.mean(own)),
            "vae_other_dynamic_psnr": float(np.mean(other)), "vae_difference": float(np.mean(np.subtract(own, other))),
            "no_vae_other_dynamic_psnr": float(np.mean(raw_other)), "no_vae_own_dynamic_psnr": 100.0}


def train_and_probe(out: Path, model: Path, steps: int, lr: str) -> dict:
    from worldtune.config import load_config
    from worldtune.data.cache import LatentCache
    from worldtune.data.cache import run as cache_run
    from worldtune.data.prepare import run as prepare_run
    from worldtune.train.trainer import Trainer

    ds = out / "ds"
    cfg = load_config(None, [
        "--prepare.source", str(out / "lerobot"), "--prepare.out", str(ds), "--prepare.num_frames", "9",
        "--prepare.stride", "2", "--prepare.workers", "1", "--prepare.val_fraction", "0.25", "--prepare.prompt_template",
        "plain", "--prepare.actions.key", "action", "--prepare.clip_policy", "sliding", "--prepare.overlap", "5",
        "--prepare.layout", "single", "--prepare.cameras", '{exterior_1 = "observation.images.exterior_1_left"}',
        "--prepare.height", "64", "--prepare.width", "112"])
    if not (ds / "actions.json").exists():
        prepare_run(cfg.prepare, quiet=True)
        cache_run(load_config(None, ["--model.path", str(model), "--cache.dataset", str(ds), "--cache.dtype", "fp32",
                                     "--train.task", "forward_dynamics"]))
    (cache_dir,) = (ds / "cache").iterdir()
    cache = LatentCache(cache_dir)
    lat = torch.stack([cache.latents(i) for i in sorted(cache.clip_ids)])
    future = lat[:, :, 1:]
    latents = {"variance": float(lat.var()), "future_between_clip_variance": float(((future - future.mean(0)) ** 2).mean())}

    tr = Trainer(load_config(None, [
        "--model.path", str(model), "--train.dataset", str(ds), "--train.out", str(out / "run"), "--train.task",
        "forward_dynamics", "--train.val_videos", "0", "--train.steps", str(steps), "--train.lr", lr, "--train.warmup", "5",
        "--train.log_every", "1000", "--train.checkpoint.every", "0", "--train.tensorboard", "false",
        "--train.batch_size", "4"]))
    tr.out.mkdir(parents=True, exist_ok=True)
    items = [tr.val_set[i] for i in range(len(tr.val_set))]
    donor = np.roll(np.arange(len(items)), 1)

    @torch.no_grad()
    def probe() -> tuple[float, float]:
        tr.transformer.eval()
        own, oth = [], []
        for i, it in enumerate(items):
            x0, text, act = tr._inputs([it])
            act2 = tr._inputs([items[donor[i]]])[2]
            for j, s in enumerate((0.3, 0.6, 0.9)):
                seed = 1000 + 10 * i + j
                own.append(float(tr._forward_loss(x0, text, [seed], model=tr.transformer, actions=act, sigma=[s], num_cond=[1])))
                oth.append(float(tr._forward_loss(x0, text, [seed], model=tr.transformer, actions=act2, sigma=[s], num_cond=[1])))
        return float(np.mean(own)), float(np.mean(oth))

    curve, t0 = [], time.time()
    curve.append({"step": 0, **dict(zip(("own", "other"), probe()))})
    while tr.step < steps:
        tr.train_step()
        if tr.step % max(1, steps // 5) == 0:
            curve.append({"step": tr.step, **dict(zip(("own", "other"), probe())), "seconds": round(time.time() - t0, 1)})
    return {"latents": latents, "held_out_clips": len(items), "lr": lr, "steps": steps, "loss_own_vs_other": curve}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/fd_sens")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--lr", default="1e-2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from worldtune.models.load import init_model_dir
    from worldtune.scene.writer import write_demo_dataset

    out = Path(args.out)
    if not (out / "lerobot" / "meta" / "info.json").exists():
        write_demo_dataset(out / "lerobot", workers=1)
    if not (out / "model" / "model_index.json").exists():
        init_model_dir("tiny-cosmos3", out / "model")
    result = {"oracle": oracle(out / "lerobot", out / "model"),
              "training": train_and_probe(out, out / "model", args.steps, args.lr),
              "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    path = Path(__file__).parent / "results" / "fd_action_sensitivity.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
