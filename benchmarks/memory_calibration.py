"""Measure the peak GPU memory of DiT training steps and compare with worldtune's memory model.

Real-size random-init Cosmos-Predict2.5-2B in bf16, LoRA r32 (fp32 adapters),
per-frame (5-D) timestep, random cached inputs (no VAE, no text encoder). Prints one row per
setting: measured peak (torch.cuda.max_memory_allocated), the model's estimate, and the error.
Run on a GPU machine: `python benchmarks/memory_calibration.py`.
"""

from __future__ import annotations

import functools
import gc
import sys
import time

import torch
import torch.utils.checkpoint as ckpt

from worldtune.models.build import build_transformer
from worldtune.models.memory import GIB, estimate_activations, memory_lines
from worldtune.models.params import count_transformer_params, largest_block_params
from worldtune.models.registry import get_spec

SETTINGS = [  # (mode, frames, height, width, checkpointed blocks, per-token timestep)
    ("lora", 29, 432, 768, 0, True),
    ("lora", 29, 432, 768, 0, False),
    ("lora", 93, 432, 768, 28, True),
    ("lora", 93, 432, 768, 28, False),
    ("lora", 93, 432, 768, 7, True),
    ("lora", 93, 704, 1280, 28, True),
]


def make_model(spec, mode: str):
    model = build_transformer(spec, device="cuda", dtype=torch.bfloat16)
    if mode == "lora":
        from peft import LoraConfig

        model.requires_grad_(False)
        model.add_adapter(LoraConfig(r=32, lora_alpha=32, target_modules=list(spec.lora_targets)))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    return model


def set_checkpointing(model, n: int) -> None:
    """Checkpoint the first n blocks (non-reentrant), the others store their activations."""
    for i, block in enumerate(model.transformer_blocks):
        if not hasattr(block, "_orig_forward"):
            block._orig_forward = block.forward
        block.forward = (functools.partial(ckpt.checkpoint, block._orig_forward, use_reentrant=False)
                         if i < n else block._orig_forward)


def step(model, opt, spec, frames, height, width, per_token):
    t_lat, h, w = (frames - 1) // 4 + 1, height // 8, width // 8
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(1, 16, t_lat, h, w, device=dev, dtype=bf)
    cm = torch.zeros(1, 1, t_lat, h, w, device=dev, dtype=bf)
    pm = torch.zeros(1, 1, height, width, device=dev, dtype=bf)
    emb = torch.randn(1, 512, spec.text_embed_dim, device=dev, dtype=bf)
    ts = torch.rand(1, 1, t_lat, 1, 1, device=dev) if per_token else torch.rand(1, device=dev)
    out = model(hidden_states=x, timestep=ts.to(bf), encoder_hidden_states=emb, condition_mask=cm,
                padding_mask=pm, return_dict=False)[0]
    loss = (out.float() - x.float()).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main() -> int:
    spec = get_spec("cosmos-predict2.5-2b")
    pc = count_transformer_params(spec.transformer, spec.lora_targets, 32)
    block = largest_block_params(spec.transformer)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'mode':5} {'shape':>13} {'ckpt':>4} {'ts':>3} {'measured GiB':>12} {'model GiB':>9} {'error':>7} {'s/step':>6}")
    model, cur_mode = None, None
    for mode, f, h, w, n_ckpt, per_token in SETTINGS:
        if mode != cur_mode:
            model = opt = None
            gc.collect(); torch.cuda.empty_cache()
            model, cur_mode = make_model(spec, mode), mode
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        set_checkpointing(model, n_ckpt)
        try:
            step(model, opt, spec, f, h, w, per_token)  # warm-up: creates Adam states
            torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
            t0 = time.time()
            step(model, opt, spec, f, h, w, per_token)
            torch.cuda.synchronize()
            dt = time.time() - t0
            peak = torch.cuda.max_memory_allocated() / GIB
        except torch.OutOfMemoryError:
            peak, dt = float("nan"), float("nan")
            gc.collect(); torch.cuda.empty_cache()
        act = estimate_activations(spec.transformer, f, h, w, 1, mode, 32, n_ckpt, 512, per_token)
        trainable = pc.total if mode == "full" else pc.lora
        lines, _ = memory_lines(pc.total, trainable, block, act, mode, 1, "none", False)
        est = sum(x.gib for x in lines)
        err = (est - peak) / peak * 100
        print(f"{mode:5} {f:>3}x{h}x{w:<4} {n_ckpt:>4} {'5D' if per_token else '1D':>3} {peak:12.2f} {est:9.2f} "
              f"{err:6.1f}% {dt:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
