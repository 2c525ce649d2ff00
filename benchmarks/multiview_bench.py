"""One LoRA training step: the grid (single-view) model vs the 3-view model at about the same tokens.

Builds a random-initialised Cosmos-Predict2.5 2B DiT in bf16 (the VAE and the 7B text encoder are
skipped: latents and projected text embeddings [1, 512, 1024] are random tensors of the real shapes,
as a cached-data step sees them; `crossattn_proj` is an Identity, as with a projected cache), adds
LoRA r32 on the six NVIDIA targets, checkpoints every block, and times forward + backward + AdamW:

  (a) grid      - the plain DiT on one 93 x 432 x 768 clip (2x2 grid of three cameras + a black cell)
  (b) 3-view    - MultiViewTransformer, joint attention, 3 views of 93 frames at a per-view size whose
                  tokens match the grid's (432x768 -> 256x432: 24 x 16 x 27 x 3 = 31,104 tokens, exactly)
  (c) per-view  - (b) with per-view attention (views folded into the batch; reference only)

Reports s/step (mean of the timed steps after warm-up), peak GPU memory, tokens, model TFLOP per step
(analytic, worldtune.models.flops) and MFU against --peak-tflops. Prints a table and writes JSON.

    python benchmarks/multiview_bench.py                    # real size, CUDA
    python benchmarks/multiview_bench.py --tiny --device cpu  # smoke test on the tiny spec
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny spec (smoke test; runs on a CPU)")
    p.add_argument("--frames", type=int, default=None, help="pixel frames per view (default 93; tiny 17)")
    p.add_argument("--grid", default=None, help="grid frame HxW (default 432x768; tiny 64x112)")
    p.add_argument("--view", default="auto", help="per-view HxW, or 'auto' = matched to the grid's tokens")
    p.add_argument("--views", type=int, default=3)
    p.add_argument("--variants", default="grid,multiview,per_view")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--steps", type=int, default=3, help="timed steps (after --warmup untimed ones)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--checkpointing", choices=("all", "off"), default="all")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--peak-tflops", type=float, default=790.0, help="dense bf16 peak for MFU (H200 measured)")
    p.add_argument("--json", default="multiview_bench.json")
    return p.parse_args(argv)


def matched_view_size(grid_hw: tuple[int, int], views: int, multiple: int = 16) -> tuple[int, int]:
    """Per-view HxW (multiples of 16) whose V views have the grid frame's token count, or as close as
    possible; among equally close sizes, the one nearest the grid's aspect ratio."""
    gh, gw = grid_hw
    target = (gh // multiple) * (gw // multiple) / views  # 16x16-pixel tokens per view frame
    aspect = gw / gh
    best = None
    for a in range(1, gh // multiple + 1):
        for b in range(1, gw // multiple + 1):
            key = (abs(a * b - target), abs(b / a - aspect))
            if best is None or key < best[0]:
                best = (key, (a * multiple, b * multiple))
    return best[1]


def _hw(text: str) -> tuple[int, int]:
    h, w = text.lower().split("x")
    return int(h), int(w)


def tokens(frames: int, hw: tuple[int, int], views: int = 1) -> int:
    return views * ((frames - 1) // 4 + 1) * (hw[0] // 16) * (hw[1] // 16)


def build(spec, device: torch.device, dtype: torch.dtype, rank: int, checkpointing: str):
    """The DiT with LoRA on its targets (fp32 adapter weights), every block checkpointed.

    Imports neither worldtune.config nor the trainer (so it runs where pydantic is missing);
    the LoRA settings are the trainer's defaults: alpha = rank, no dropout, default init.
    """
    from types import SimpleNamespace

    from worldtune.models.build import build_transformer
    from worldtune.train.adapters import apply_training_mode

    torch.manual_seed(0)
    tr = build_transformer(spec, device=device, dtype=dtype)
    tr.crossattn_proj = torch.nn.Identity()  # projected-text cache: the trainer's default for adapters
    lora = SimpleNamespace(rank=rank, alpha=None, dropout=0.0, targets=list(spec.lora_targets), init="default")
    params = apply_training_mode(tr, "lora", lora)
    if checkpointing == "all":
        tr.enable_gradient_checkpointing()  # every block, recomputed in backward (non-reentrant)
    return tr, params


def run_variant(name: str, spec, args, device: torch.device, frames: int, hw: tuple[int, int], views: int) -> dict:
    from worldtune.models.flops import train_step_flops
    from worldtune.models.multiview import MultiViewTransformer, multiview_flow_batch
    from worldtune.models.predict import transformer_inputs
    from worldtune.train.flow import FlowMatchingLoss

    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    tr, params = build(spec, device, dtype, args.rank, args.checkpointing)
    model = tr
    if name != "grid":
        model = MultiViewTransformer(tr, views, attention="joint" if name == "multiview" else "per_view")
        params = params + model.extra_parameters()
    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=1e-3, fused=cuda or None)
    obj = FlowMatchingLoss()
    t_lat, h_lat, w_lat = (frames - 1) // 4 + 1, hw[0] // 8, hw[1] // 8
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(1, 16, views, t_lat, h_lat, w_lat, generator=gen).to(device)
    text = torch.randn(1, spec.max_sequence_length, spec.transformer["encoder_hidden_states_channels"],
                       generator=gen).to(device)
    times = []
    for step in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        if name == "grid":
            fb = obj.prepare(x0[:, :, 0], [step], sigma=[0.5], num_cond=[1])
        else:
            fb = multiview_flow_batch(obj, x0, [step], sigma=[0.5], num_cond=[1])
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False):
            pred = model(**transformer_inputs(fb, text, dtype))[0]
        loss = obj.loss(pred, fb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    step_s = sum(times) / len(times)
    if name == "per_view":
        flops = views * train_step_flops(spec.transformer, frames, *hw, text_tokens=spec.max_sequence_length)
    else:  # joint attention over V stacked views = one clip of V*T latent frames
        stacked_frames = 4 * (views * t_lat - 1) + 1  # pixel frames whose latents are V*T frames
        flops = train_step_flops(spec.transformer, stacked_frames, *hw, text_tokens=spec.max_sequence_length)
    row = {"variant": name, "views": views, "frames": frames, "size": f"{hw[0]}x{hw[1]}",
           "tokens": tokens(frames, hw, views), "step_s": round(step_s, 4), "steps_timed": len(times),
           "loss": round(float(loss.detach()), 4), "tflop_per_step": float(f"{flops / 1e12:.4g}"),
           "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if cuda else None,
           "mfu": round(flops / step_s / (args.peak_tflops * 1e12), 3) if cuda else None,
           "trainable_params": sum(p.numel() for p in params)}
    del model, tr, opt, params
    return row


def main(argv: list[str] | None = None) -> dict:
    from rich.console import Console
    from rich.table import Table

    from worldtune.models.registry import get_spec

    args = parse(argv)
    device = torch.device(args.device)
    spec = get_spec("tiny-predict2.5" if args.tiny else "cosmos-predict2.5-2b")
    frames = args.frames or (17 if args.tiny else 93)
    grid_hw = _hw(args.grid) if args.grid else ((64, 112) if args.tiny else (432, 768))
    view_hw = matched_view_size(grid_hw, args.views) if args.view == "auto" else _hw(args.view)
    rows = []
    for name in [v.strip() for v in args.variants.split(",") if v.strip()]:
        if name not in ("grid", "multiview", "per_view"):
            raise SystemExit(f"unknown variant {name!r}: use grid, multiview, per_view")
        hw, views = (grid_hw, 1) if name == "grid" else (view_hw, args.views)
        rows.append(run_variant(name, spec, args, device, frames, hw, views))
    meta = {"spec": spec.name, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else
            platform.processor() or "cpu", "torch": torch.__version__, "rank": args.rank,
            "checkpointing": args.checkpointing, "grid": f"{grid_hw[0]}x{grid_hw[1]}",
            "view": f"{view_hw[0]}x{view_hw[1]}", "date": time.strftime("%Y-%m-%d")}
    try:
        import diffusers

        meta["diffusers"] = diffusers.__version__
    except ImportError:
        pass
    table = Table(title=f"one LoRA r{args.rank} step, {spec.name}, {meta['device']}")
    for col in ("variant", "views x frames x size", "tokens", "s/step", "peak GiB", "TFLOP/step", "MFU"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["variant"], f"{r['views']} x {r['frames']} x {r['size']}", f"{r['tokens']:,}",
                      f"{r['step_s']:.3f}", "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}",
                      f"{r['tflop_per_step']:.4g}", "-" if r["mfu"] is None else f"{r['mfu']:.0%}")
    Console().print(table)
    result = {"meta": meta, "results": rows}
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
