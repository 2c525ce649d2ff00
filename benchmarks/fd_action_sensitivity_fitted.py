"""Action sensitivity of the tiny Cosmos 3 once its VAE can see the scene: the chain of the actions issue on a GPU.

`fd_action_sensitivity.py` showed that the *random* tiny VAE keeps nothing of the demo scene (a round trip reads
~12 dB), so no forward-dynamics model can read its actions through it. This script removes that one obstacle and
measures the rest of the chain with worldtune's own stages:

1. Render the demo robot (`--episodes`, 4-D actions) and build `tiny-cosmos3`; fit the tiny Wan2.2 VAE (same class,
   same config) to the demo's exterior camera at 64x112 for `--vae-steps` (L1 + MSE of the round trip, AdamW),
   then write it back into the model folder (safetensors). Reported: round-trip PSNR and the oracle bound of
   `fd_action_sensitivity.oracle` (a perfect dynamics model under own vs another episode's frames, through this VAE).
2. `prepare` (one camera, 9-frame clips = 8-action chunks, sliding, 25 % held out), `cache`, and a
   forward-dynamics LoRA run (`train.task = "forward_dynamics"`, `--steps`, batch `--batch`).
3. `evaluate.mode = "actions"` on the held-out episodes: dynamic PSNR under the clip's own actions and under
   another episode's (seeded derangement), for the base model and the trained adapter; the action sensitivity
   (own - other) with its bootstrap CI.

    python benchmarks/fd_action_sensitivity_fitted.py --out /tmp/fd_fit --json fd_fit.json           # GPU
    python benchmarks/fd_action_sensitivity_fitted.py --out /tmp/fd_fit --steps 2000 --lr 1e-2 ...   # reuses the fit
    python benchmarks/fd_action_sensitivity_fitted.py --out /tmp/fd_fit --episodes 6 --vae-steps 2 --steps 2 \\
        --eval-steps 1 --json /tmp/fd_fit.json                                                          # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fd_action_sensitivity import oracle  # noqa: E402

CAMERA = "observation.images.exterior_1_left"


def demo_clips(root: Path, frames: int = 17, step: int = 4) -> torch.Tensor:
    """Every `frames`-long window (every `step` frames) of the exterior camera at 64x112, in [-1, 1], [N, 3, T, H, W]."""
    import cv2

    from worldtune.data.lerobot import LeRobotDataset

    ds = LeRobotDataset(root)
    clips = []
    for ep in ds.episodes:
        fr = [cv2.resize(f, (112, 64), interpolation=cv2.INTER_AREA) for f in ds.episode_frames(ep, CAMERA)]
        clips += [np.stack(fr[s:s + frames]) for s in range(0, len(fr) - frames + 1, step)]
    return torch.from_numpy(np.stack(clips)).permute(0, 4, 1, 2, 3).float() / 127.5 - 1


def fit_vae(model: Path, root: Path, steps: int, batch: int, lr: float, device: str) -> dict:
    """Fit the tiny VAE's round trip to the demo clips; write it back into the model folder."""
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(model, subfolder="vae").to(device)
    x = demo_clips(root)
    held = torch.arange(0, len(x), 10)
    train = torch.tensor([i for i in range(len(x)) if i not in set(held.tolist())])
    opt = torch.optim.AdamW(vae.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    gen = torch.Generator().manual_seed(0)

    def round_trip(b: torch.Tensor) -> torch.Tensor:
        return vae.decode(vae.encode(b).latent_dist.mode()).sample

    @torch.no_grad()
    def psnr() -> float:
        vals = []
        for i in held.tolist():
            b = x[i:i + 1].to(device)
            mse = ((round_trip(b).clamp(-1, 1) - b) / 2).pow(2).mean()
            vals.append(float(10 * torch.log10(1 / mse)))
        return float(np.mean(vals))

    curve, t0 = [{"step": 0, "psnr": psnr()}], time.time()
    for s in range(1, steps + 1):
        b = x[train[torch.randint(len(train), (batch,), generator=gen)]].to(device)
        y = round_trip(b)
        loss = (y - b).abs().mean() + (y - b).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if s % max(1, steps // 5) == 0 or s == steps:
            curve.append({"step": s, "psnr": psnr(), "seconds": round(time.time() - t0, 1)})
            print(f"vae step {s}: held-out round-trip PSNR {curve[-1]['psnr']:.2f} dB", flush=True)
    vae.to("cpu").save_pretrained(model / "vae", safe_serialization=True)
    return {"clips": len(x), "held_out": len(held), "steps": steps, "batch": batch, "lr": lr, "curve": curve}


def train_and_evaluate(out: Path, model: Path, args: argparse.Namespace) -> dict:
    from worldtune.config import load_config
    from worldtune.data.cache import run as cache_run
    from worldtune.data.prepare import run as prepare_run
    from worldtune.eval.dynamics import OTHER_SUFFIX
    from worldtune.eval.evaluate import run as evaluate
    from worldtune.train.trainer import Trainer

    ds = out / "ds"
    if not (ds / "actions.json").exists():
        prepare_run(load_config(None, [
            "--prepare.source", str(out / "lerobot"), "--prepare.out", str(ds), "--prepare.num_frames", "9",
            "--prepare.stride", "2", "--prepare.workers", "4", "--prepare.val_fraction", "0.25",
            "--prepare.prompt_template", "plain", "--prepare.actions.key", "action", "--prepare.clip_policy", "sliding",
            "--prepare.overlap", "5", "--prepare.layout", "single", "--prepare.cameras", f'{{exterior_1 = "{CAMERA}"}}',
            "--prepare.height", "64", "--prepare.width", "112"]).prepare, quiet=True)
    fd = ("--model.path", str(model), "--train.task", "forward_dynamics")
    cache_run(load_config(None, [*fd, "--cache.dataset", str(ds), "--cache.dtype", "fp32"]))
    t0 = time.time()
    summary = Trainer(load_config(None, [
        *fd, "--train.dataset", str(ds), "--train.out", str(out / f"run_{args.steps}"), "--train.steps", str(args.steps),
        "--train.lr", str(args.lr), "--train.warmup", "20", "--train.batch_size", str(args.batch),
        "--train.val_videos", "0", "--train.tensorboard", "false", "--train.checkpoint.every", "0",
        "--train.log_every", str(max(1, args.steps // 10))])).fit()
    train_s = time.time() - t0
    results = evaluate(load_config(None, [
        "--model.path", str(model), "--evaluate.mode", "actions", "--evaluate.out", str(out / f"eval_{args.steps}"),
        "--evaluate.metrics", '["pixels"]', "--evaluate.workers", "2", "--evaluate.actions.dataset", str(ds),
        "--evaluate.actions.steps", str(args.eval_steps), "--evaluate.actions.seeds", "[0, 1]",
        "--evaluate.actions.adapters", f'[{{path = "{summary["export"]}", name = "fd"}}]']))
    models, figures = results["models"], {}
    for label in ("base", "fd"):
        figures[label] = {"psnr": models[label]["psnr"]["mean"], "dynamic_psnr": models[label]["dynamic_psnr"]["mean"],
                          "other_dynamic_psnr": models[label + OTHER_SUFFIX]["dynamic_psnr"]["mean"],
                          "action_sensitivity": models[label]["action_sensitivity"]["dynamic_psnr"]}
    return {"train": {k: v for k, v in summary.items() if isinstance(v, (int, float))},
            "train_seconds": round(train_s, 1), "evaluate": figures}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/fd_fit")
    p.add_argument("--episodes", type=int, default=64, help="demo episodes rendered")
    p.add_argument("--vae-steps", type=int, default=3000)
    p.add_argument("--vae-batch", type=int, default=8)
    p.add_argument("--vae-lr", type=float, default=2e-3)
    p.add_argument("--steps", type=int, default=3000, help="forward-dynamics training steps")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-steps", type=int, default=35, help="denoising steps in the evaluation")
    p.add_argument("--json", default="fd_action_sensitivity_fitted.json")
    args = p.parse_args()
    from worldtune.models.load import init_model_dir
    from worldtune.scene.writer import write_demo_dataset

    out, device = Path(args.out), "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.time()
    result: dict = {"args": vars(args)}
    if not (out / "model" / "model_index.json").exists():  # else: a finished fit of an earlier run, reused
        write_demo_dataset(out / "lerobot", episodes=args.episodes, workers=4)
        init_model_dir("tiny-cosmos3", out / "model")
        result["vae"] = fit_vae(out / "model", out / "lerobot", args.vae_steps, args.vae_batch, args.vae_lr, device)
    result["meta"] = {"device": torch.cuda.get_device_name() if device == "cuda" else platform.machine(),
                      "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if "vae" in result:
        result["oracle"] = oracle(out / "lerobot", out / "model")
    print("oracle:", json.dumps(result.get("oracle")), flush=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")  # kept if a later phase is cut short
    result.update(train_and_evaluate(out, out / "model", args))
    result["meta"]["wall_s"] = round(time.time() - t0, 1)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result.get(k) for k in ("oracle", "train", "train_seconds", "evaluate")}, indent=1))


if __name__ == "__main__":
    main()
