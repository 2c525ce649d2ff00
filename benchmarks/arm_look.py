"""How well a seed model's views can show the arm: the arm's footprint and contrast in each camera view of the
model's grid clips, and how much of it survives the model's VAE, for the scene's grey arm and its bold one.

    .venv/bin/python benchmarks/arm_look.py --model seed-predict2.5 --episodes 6
    .venv/bin/python benchmarks/arm_look.py --model seed-cosmos3 --arms bold --vae DIR --transformer '{"latent_patch_size": 1}'

Renders the demo's held-out episodes (the model's camera size and task) twice, with and without the arm, packs both
into the model's grid clips as `worldtune prepare` does (no codec: the figures are of the views, not of an encode),
and reports per view:
- the arm's footprint: pixels, and tokens of the transformer (VAE factor x latent patch per token side);
- its contrast: mean |frame - the same frame without the arm| over the arm's pixels (8-bit levels, per channel);
- the VAE round trip's PSNR on the view, and the arm kept: sum((decoded - plate) * (real - plate)) /
  sum((real - plate)^2) over the arm's pixels, the share of the arm's signal the decode keeps in place (1 = all of
  it, 0 = blurred into the background).
Writes benchmarks/results/arm_look.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ARM_PIXEL_LEVELS = 12  # a view's pixel belongs to the arm where the frames with and without it differ this much


def token_pixels(spec) -> int:
    """Pixels per side of one transformer token: the VAE's spatial factor times the latent patch."""
    factor = int(spec.vae.get("scale_factor_spatial", 8))  # Wan2.1's VAE: 8, Wan2.2's: 16
    patch = spec.transformer.get("latent_patch_size") or spec.transformer["patch_size"][1]
    return factor * int(patch)


def render_clips(model: str, arm: str, episodes: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """[E, T, H, W, 3] uint8 grid clips of the demo's held-out episodes at the model's size, with and without the
    arm (the plate: the same scene, the moving block where it is)."""
    import worldtune.scene.episode as scene
    from worldtune.data.layout import GridLayout
    from worldtune.demo import demo_data
    from worldtune.models.registry import get_spec

    spec = get_spec(model)
    data = {**demo_data(model), "episodes": episodes, "length": frames, "arm": arm}
    size = {k: data.pop(k) for k in ("height", "width")}
    eps = scene.demo_episodes(seed=0, **size, **data)
    layout = GridLayout(height=spec.height, width=spec.width)
    roles = {"exterior_1": "exterior_1_left", "exterior_2": "exterior_2_left", "wrist": "wrist_left"}
    with_arm, plate = [], []
    moving_at = scene.SyntheticEpisode._moving_at
    for ep in eps:
        views = {r: np.stack([ep.render_view(n, i) for i in range(frames)]) for r, n in roles.items()}
        scene.SyntheticEpisode._moving_at = lambda self, g, o, b: [p for p in moving_at(self, g, o, b)
                                                                    if p.texture != "arm"]
        try:
            bare = {r: np.stack([ep.render_view(n, i) for i in range(frames)]) for r, n in roles.items()}
        finally:
            scene.SyntheticEpisode._moving_at = moving_at
        with_arm.append(layout.pack(views))
        plate.append(layout.pack(bare))
    return np.stack(with_arm), np.stack(plate)


def round_trip(model: str, clips: np.ndarray, vae_dir: Path | None = None) -> np.ndarray:
    """The clips through the model's VAE, or the one in `vae_dir` (encode, decode), as uint8."""
    from diffusers import AutoencoderKLWan

    from worldtune.models.load import init_model_dir

    if vae_dir is not None:
        vae = AutoencoderKLWan.from_pretrained(vae_dir, torch_dtype=torch.float32).eval()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            init_model_dir(model, Path(tmp) / "m")
            vae = AutoencoderKLWan.from_pretrained(Path(tmp) / "m", subfolder="vae").eval()
    out = []
    with torch.no_grad():
        for clip in clips:
            x = torch.from_numpy(clip).float().div(127.5).sub(1).permute(3, 0, 1, 2)[None]
            y = vae.decode(vae.encode(x).latent_dist.mode()).sample[0]
            out.append(((y.clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 3, 0).numpy())
    return np.stack(out)


def view_figures(real: np.ndarray, plate: np.ndarray, decoded: np.ndarray, token_px: int) -> dict[str, float]:
    """One view's figures over all its clips and frames ([E, T, h, w, 3] each)."""
    r, p, d = (a.astype(np.float64) for a in (real, plate, decoded))
    arm = np.abs(r - p).max(-1) >= ARM_PIXEL_LEVELS
    signal = (r - p)[arm]
    mse = float(((d - r) ** 2).mean())
    frames = real.shape[0] * real.shape[1]
    return {"arm_pixels": float(arm.sum() / frames), "arm_tokens": float(arm.sum() / frames / token_px ** 2),
            "arm_contrast": float(np.abs(signal).mean()) if arm.any() else 0.0,
            "vae_psnr": float(10 * np.log10(255 ** 2 / max(mse, 1e-12))),
            "arm_kept": float(((d - p)[arm] * signal).sum() / max((signal ** 2).sum(), 1e-12))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="seed-predict2.5", help="a seed model's registry name")
    ap.add_argument("--episodes", type=int, default=6, help="held-out episodes rendered per arm look")
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--arms", default="grey,bold", help="the arm looks compared, comma-separated")
    ap.add_argument("--vae", type=Path, default=None,
                    help="a VAE folder (config.json and weights, as `worldtune autoencoder` writes) instead of the seed's")
    ap.add_argument("--transformer", type=json.loads, default={},
                    help='the transformer\'s config changes for the token count, as JSON (\'{"latent_patch_size": 1}\')')
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "arm_look.json")
    args = ap.parse_args()
    from worldtune.data.layout import GridLayout
    from worldtune.models.build import with_transformer_changes
    from worldtune.models.registry import get_spec

    spec = with_transformer_changes(get_spec(args.model), args.transformer)
    t0 = time.perf_counter()
    token_px = token_pixels(spec)
    layout = GridLayout(height=spec.height, width=spec.width)
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for arm in args.arms.split(","):
        real, plate = render_clips(args.model, arm, args.episodes, args.frames)
        decoded = round_trip(args.model, real, args.vae)
        rows[arm] = {}
        for role in layout.roles:
            parts = [layout.split(a.reshape(-1, *a.shape[2:]))[role] for a in (real, plate, decoded)]
            parts = [x.reshape(real.shape[0], real.shape[1], *x.shape[1:]) for x in parts]
            rows[arm][role] = view_figures(*parts, token_px)
            f = rows[arm][role]
            print(f"{args.model} arm {arm:5s} {role:10s}: arm {f['arm_pixels']:6.0f} px = {f['arm_tokens']:5.2f} tokens, "
                  f"contrast {f['arm_contrast']:5.1f} levels, VAE round trip {f['vae_psnr']:5.2f} dB, "
                  f"arm kept {f['arm_kept']:.2f}")
    row = {"model": args.model, "vae": str(args.vae) if args.vae else "shipped", "transformer": args.transformer,
           "episodes": args.episodes, "frames": args.frames, "token_px": token_px,
           "grid": [spec.height, spec.width], "views": rows,
           "seconds": round(time.perf_counter() - t0, 1), "machine": platform.node(),
           "processor": platform.processor(), "date": time.strftime("%Y-%m-%d")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
