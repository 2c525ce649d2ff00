"""Cosmos3-Edge forward- or inverse-dynamics LoRA training step on one GPU (what `train.task =
"forward_dynamics"` / `"inverse_dynamics"` runs).

Builds a random-initialised real-size `cosmos3-edge` transformer from the registry (bf16, its `time_embedder`
kept in fp32 as `from_pretrained(torch_dtype=bfloat16)` keeps it) and times worldtune's training step:
LoRA rank 16 / alpha 32 on the family's generator targets (`apply_training_mode`: bf16 base, fp32 adapters) plus
one embodiment domain's rows of the action input projection (`train_domain_rows`; with `--task inverse_dynamics`
also the output projection's), fused AdamW over both, NVIDIA's Cosmos 3 objective at the tier's canvas ("waver"
times, shift 5 at the 480 tier, no caption dropout so that every step has the same shapes) and the prediction
`predict_dynamics` (text, video latents, one token per action step). Forward dynamics: the first latent frame and
every action clean, the video's velocity scored (`FlowMatchingLoss`); inverse dynamics: every latent frame clean,
the actions noised and their velocity scored (`worldtune.train.action_flow`).

Default shape, after NVIDIA's DROID forward-dynamics recipe: 17 frames (16 actions of the 10-D `droid_lerobot`
domain) at the 480 tier, the clip filling the 480x832 canvas (latents [48, 5, 30, 52], 1,950 video tokens after 2x2 patching), the
pipeline's JSON action caption tokenized by worldtune's offline byte-level tokenizer (one token per character,
so longer than Qwen's tokenization of the same caption: the text share of the step is an upper bound). Latents
and actions are random: no VAE runs, as when training from the cache.

`--batch 1,4` times each variant at several clips per step (the trainer's `train.batch_size`: clips of one
sequence shape share one transformer call, models/cosmos3_batch.py), each clip its own noise and noise level.

Variants: `eager`; `compiled` (regional torch.compile of the repeated blocks, as the trainer does on CUDA);
`--checkpoint selective` recomputes the blocks' non-attention parts in backward. Reported per variant: s/step
(median of the timed steps after 2 warm-up steps), MFU against 989 TFLOP/s (H200 dense bf16) and
WORLDTUNE_PEAK_TFLOPS (the trainer's peak, default 790) from the family's FLOP count of the step (3 x forward at
the exact text length with the task's clean frames: one, or all of them for inverse dynamics, which feeds no
timestep embedding and no output projection to the video; the 16 action tokens are not counted, < 0.3 % of the
sequence), peak GPU memory, trainable parameters and the losses.

    python benchmarks/cosmos3_fd_bench.py --json cosmos3_fd_bench.json         # real size on CUDA
    python benchmarks/cosmos3_fd_bench.py --batch 1,2,4 --json cosmos3_fd_bench_batch.json  # several clips per step
    python benchmarks/cosmos3_fd_bench.py --task inverse_dynamics --json cosmos3_id_bench.json
    python benchmarks/cosmos3_fd_bench.py --tiny --json /tmp/cosmos3_fd.json   # CPU smoke test on tiny-cosmos3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosmos3_bench import keep_fp32_modules, sync  # noqa: E402

H200_PEAK_TFLOPS = 989.0
TRAIN_VARIANTS = {"eager": False, "compiled": True}
TASK = "Pick up the marker and put it in the cup."


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny-cosmos3, 5 frames, 32x64 content (smoke test)")
    p.add_argument("--task", choices=("forward_dynamics", "inverse_dynamics"), default="forward_dynamics",
                   help="which action task's training step to time")
    p.add_argument("--frames", type=int, default=None, help="clip frames = actions + 1; default 17 (tiny: 5)")
    p.add_argument("--height", type=int, default=None, help="content height; default 480 (tiny: 32)")
    p.add_argument("--width", type=int, default=None, help="content width; default 832 (tiny: 64)")
    p.add_argument("--tier", type=int, default=None, help="action resolution tier; default 480 (tiny: 256)")
    p.add_argument("--domain", default=None, help="embodiment domain; default droid_lerobot (tiny: a new 4-D slot)")
    p.add_argument("--variants", default=None, help="default eager,compiled (CPU: eager)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per variant; default 5 (tiny: 2)")
    p.add_argument("--batch", default="1", help="clips per step, comma-separated to time several (e.g. 1,4): the "
                   "trainer's `train.batch_size`, the clips of one shape sharing each transformer call")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank (NVIDIA's Cosmos 3 LoRA recipe: 16)")
    p.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha (NVIDIA's recipe: 32)")
    p.add_argument("--checkpoint", choices=("none", "selective"), default="none",
                   help="activation checkpointing of the repeated blocks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="cosmos3_fd_bench.json", help="where to write the results")
    args = p.parse_args(argv)
    for name, real, tiny in (("frames", 17, 5), ("height", 480, 32), ("width", 832, 64), ("tier", 480, 256),
                             ("steps", 5, 2)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else real)
    if args.variants is None:
        args.variants = "eager,compiled" if args.device.startswith("cuda") else "eager"
    return args


def caption_ids(canvas: tuple[int, int], chunk: int, fps: float) -> torch.Tensor:
    """[1, 2, L] token ids of the pipeline's action caption and the dropped text (a tiny pipeline only tokenizes)."""
    from worldtune.models.cosmos3_actions import action_prompt_token_ids
    from worldtune.models.family import family_of
    from worldtune.models.registry import get_spec

    pipe = family_of(get_spec("tiny-cosmos3")).build_pipeline()
    ids, empty = action_prompt_token_ids(pipe, TASK, chunk, *canvas, fps, "concat_view")
    out = torch.full((1, 2, max(len(ids), len(empty))), -1, dtype=torch.long)
    out[0, 0, :len(ids)], out[0, 1, :len(empty)] = torch.tensor(ids), torch.tensor(empty)
    return out


def domain_for(args):
    from worldtune.models.cosmos3_domains import resolve_domain

    if args.domain is None and args.tiny:
        return resolve_domain(None, None, 4, "bench", "benchmark")
    return resolve_domain(args.domain or "droid_lerobot", None, 10, "bench", "benchmark")


def bench(args, device: torch.device, dtype: torch.dtype) -> tuple[list[dict], dict]:
    from worldtune.models.cosmos3 import recipe_objective
    from worldtune.models.cosmos3_actions import action_canvas, predict_dynamics, train_domain_rows
    from worldtune.models.family import family_of
    from worldtune.models.registry import get_spec
    from worldtune.models.speed import apply_selective_checkpointing, apply_speed, repeated_blocks
    from worldtune.train.action_flow import action_loss, clean_frames, predicts_actions, prepare_actions
    from worldtune.train.adapters import apply_training_mode
    from worldtune.train.flow import FlowMatchingLoss

    spec = get_spec("tiny-cosmos3" if args.tiny else "cosmos3-edge")
    family = family_of(spec)
    f, h, w, chunk = args.frames, args.height, args.width, args.frames - 1
    canvas = action_canvas(h, w, args.tier)
    if h > canvas[0] or w > canvas[1]:
        raise SystemExit(f"content {h}x{w} exceeds the {args.tier} tier's canvas {canvas}: lower it or raise --tier")
    domain = domain_for(args)
    text = caption_ids(canvas, chunk, float(spec.fps)).to(device)
    torch.manual_seed(args.seed)
    model = keep_fp32_modules(family.build_transformer(device, dtype))
    lora = SimpleNamespace(rank=args.rank, alpha=args.alpha, dropout=0.0, targets=None, init="default")
    params = apply_training_mode(model, "lora", lora, family)
    rows = train_domain_rows(model, domain.id, outputs=predicts_actions(args.task))
    if args.checkpoint == "selective":
        apply_selective_checkpointing(model, list(range(len(repeated_blocks(model)))))
    opt = torch.optim.AdamW(params + rows, lr=1e-4, fused=device.type == "cuda")
    objective = FlowMatchingLoss(**{**recipe_objective(*canvas), "cond_frames_probs": ((1, 1.0),),
                                    "text_dropout": 0.0})
    t, lh, lw = family.latent_size(f, h, w)
    gen = torch.Generator().manual_seed(args.seed)
    batches = [int(b) for b in str(args.batch).split(",") if b]
    most = max(batches)
    x0_all = torch.randn(most, int(spec.transformer["latent_channel"]), t, lh, lw, generator=gen).to(device)
    actions_all = torch.randn(most, chunk, domain.width, generator=gen).clamp(-1, 1).to(device)
    text_tokens = int((text[0, 0] >= 0).sum())
    clean = clean_frames(args.task, t)
    clip_flops = 3.0 * family.forward_flops(f, h, w, text_tokens=text_tokens, cond_frames=clean).total
    env_peak = float(os.environ.get("WORLDTUNE_PEAK_TFLOPS", "790"))

    def step(i: int, b: int) -> float:
        seeds = [args.seed + i * most + k for k in range(b)]  # every clip its own noise and noise level
        batch = objective.prepare(x0_all[:b], seeds, num_cond=[clean] * b)
        chunk = prepare_actions(actions_all[:b], seeds, batch.sigma, [args.task] * b)
        pred, action_pred = predict_dynamics(model, batch, text.expand(b, -1, -1), chunk,
                                             torch.full((b,), domain.id, device=device), dtype, float(spec.fps))
        loss = objective.loss(pred, batch) + action_loss(action_pred, chunk)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params + rows, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    def timed(name: str, b: int) -> dict:
        t0 = time.perf_counter()
        for i in range(2):  # warm-up: compilation, autotuning, optimizer state
            step(i, b)
        sync(device)
        warm = time.perf_counter() - t0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        losses, times = [], []
        for i in range(args.steps):
            sync(device)
            t0 = time.perf_counter()
            losses.append(step(100 + i, b))
            sync(device)
            times.append(time.perf_counter() - t0)
        s, step_flops = float(np.median(times)), clip_flops * b
        return {
            "variant": name, "batch": b, "s_per_step": round(s, 4), "s_per_clip": round(s / b, 4),
            "step_times_s": [round(x, 4) for x in times], "warmup_s": round(warm, 2), "step_flops": step_flops,
            "mfu_989": round(step_flops / s / (H200_PEAK_TFLOPS * 1e12), 4),
            f"mfu_{env_peak:g}": round(step_flops / s / (env_peak * 1e12), 4),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
            "losses": [round(x, 4) for x in losses],
        }

    out, compiled = [], False
    for name in [v for v in args.variants.split(",") if v]:
        if name not in TRAIN_VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: choose from {', '.join(TRAIN_VARIANTS)}")
        if TRAIN_VARIANTS[name] and device.type != "cuda":
            out.append({"variant": name, "skipped": "needs CUDA"})
            continue
        if compiled and not TRAIN_VARIANTS[name]:
            out.append({"variant": name, "skipped": "an earlier variant compiled the blocks: put it earlier"})
            continue
        for b in batches:
            try:
                if TRAIN_VARIANTS[name] and not compiled:
                    apply_speed(model, fused_adaln=False, compile=True, attention=None, dynamic=family.compile_dynamic)
                    compiled = True
                out.append(timed(name, b))
            except Exception as e:  # noqa: BLE001 -- record the failure, run the other variants
                out.append({"variant": name, "batch": b, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
                print(f"{name} batch {b} failed: {out[-1]['error']}")
    shape = {"spec": spec.name, "task": args.task, "frames": f, "actions": chunk, "content": [h, w], "tier": args.tier,
             "canvas": list(canvas), "latent": [t, lh, lw], "video_tokens": t * -(-lh // family.patch) * -(-lw // family.patch),
             "text_tokens": text_tokens, "domain": domain.to_dict(), "lora_rank": args.rank, "lora_alpha": args.alpha,
             "lora_params": sum(p.numel() for p in params), "domain_row_params": sum(p.numel() for p in rows),
             "checkpoint": args.checkpoint, "dtype": str(dtype).removeprefix("torch.")}
    return out, shape


def main(argv: list[str] | None = None) -> dict:
    import diffusers

    args = parse(argv)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    rows, shape = bench(args, device, dtype)
    meta = {**shape, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "diffusers": diffusers.__version__, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "wall_s": round(time.perf_counter() - t0, 1)}
    print(f"\n{shape['spec']} {shape['task'].replace('_', ' ')}, {shape['frames']} frames ({shape['actions']} actions of "
          f"{shape['domain']['name']}) at the {shape['tier']} tier, content {shape['content']} of canvas {shape['canvas']}, "
          f"{shape['video_tokens']} video + {shape['text_tokens']} text tokens, LoRA r{args.rank} "
          f"({shape['lora_params']:,} params) + domain rows ({shape['domain_row_params']:,}) on {meta['device']}")
    for r in rows:
        if "s_per_step" not in r:
            print(f"{r['variant']:10s} {r.get('skipped') or r.get('error')}")
            continue
        print(f"{r['variant']:10s} batch {r['batch']}  {r['s_per_step']:.3f} s/step  MFU {100 * r['mfu_989']:.1f}% of 989 TFLOP/s  "
              f"peak {r['peak_mem_gib']} GiB  losses {r['losses']}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "training": rows}
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
