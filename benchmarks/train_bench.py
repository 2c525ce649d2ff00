"""Training-step speed of Cosmos-Predict2.5 2B, side by side in one run (issue 9).

Real-size random-init DiT from the registry (bf16 base, fp32 adapters), random inputs of the real
shapes, 93 frames at 432x768, batch 1, one CUDA GPU. Variants (one table row each):

  A          the diffusers example per step: VAE encode of a random clip (Wan2.1-size VAE), the
             crossattn_proj on raw [1, 512, 100352] text embeddings (the 7B text encoder itself,
             0.04 s/step measured, is left out), diffusers' gradient checkpointing on every block,
             default SDPA, LoRA r32, AdamW (foreach, not fused)
  B_*        worldtune's step from cached latents and projected text: FlowMatchingLoss.prepare +
             transformer_inputs, apply_training_mode, the trainer's choose/apply_checkpointing,
             speed.apply_speed, fused AdamW; one switch more per row
  C_full     full fine-tuning (fp32 master weights, bf16 autocast, raw text through crossattn_proj)
  sdpa_*     one self-attention forward + backward at the real shape per SDPA kernel

MFU = model FLOPs (3 x forward, models/flops.py, adaLN counted per frame: the same count for every
row) / step time / the bf16 matmul rate measured in this run (8192^3, median of 10). The `B_best`
and `B_sac` rows also check numerics: loss and adapter gradients of the optimised step against the eager step
on the same init and inputs. JSON is rewritten after every variant (partial results survive a
timeout); `--budget-s` skips variants that would not finish in time.

    PYTHONUNBUFFERED=1 python benchmarks/train_bench.py --out train_bench.json     # one H200
    python benchmarks/train_bench.py --tiny --device cpu --out /tmp/tb.json          # CPU smoke test
    python benchmarks/train_bench.py --list                                          # variant names
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import traceback
import types
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from worldtune.models.build import build_transformer, build_vae  # noqa: E402
from worldtune.models.flops import train_step_flops  # noqa: E402
from worldtune.models.latents import encode  # noqa: E402
from worldtune.models.registry import get_spec  # noqa: E402
from worldtune.models import speed  # noqa: E402
from worldtune.train.adapters import apply_training_mode  # noqa: E402
from worldtune.models.predict import transformer_inputs  # noqa: E402
from worldtune.train.flow import FlowMatchingLoss, sample_seed  # noqa: E402

from worldtune.train.trainer import apply_checkpointing, choose_checkpointing  # noqa: E402  (needs pydantic)

GIB = 2**30
BF16 = torch.bfloat16


# ------------------------------------------------------------------------------------- variants
@dataclass(frozen=True)
class Variant:
    name: str
    what: str
    kind: str = "flow"  # example | flow | sdpa
    mode: str = "lora"  # lora | dora | full
    fused: bool = False
    compile: bool = False
    cuda_graphs: bool = False
    attention: str | None = None
    ckpt: str = "all"  # all | auto | off | sac (every block, attention outputs kept)
    res: str = "low"  # low = 432x768, high = 704x1280
    batch: int = 1
    numerics: bool = False
    cost_s: float = 60.0  # rough seconds on one H200, for --budget-s
    cuda_only: bool = False
    fp8: bool = False  # train.fp8: torchao's float8 training of the blocks' linears (models/float8.py)


VARIANTS: list[Variant] = [
    Variant("A_example", "diffusers example: VAE + text proj per step, ckpt all, eager, AdamW", kind="example",
            cost_s=45),
    Variant("B_eager", "cached inputs, ckpt all, eager, fused AdamW", cost_s=30),
    Variant("B_fused", "+ per-frame adaLN", fused=True, cost_s=28),
    Variant("B_best", "+ compile + auto ckpt (numerics vs B_eager)", fused=True, compile=True, ckpt="auto",
            numerics=True, cost_s=100),
    Variant("B_sac", "per-frame adaLN + compile + selective ckpt (keep attention)", fused=True, compile=True,
            ckpt="sac", numerics=True, cost_s=100),
    Variant("sdpa", "self-attention fwd+bwd per SDPA kernel", kind="sdpa", cost_s=15, cuda_only=True),
    Variant("B_sac_704", "B_sac at 704x1280", fused=True, compile=True, ckpt="sac", res="high", cost_s=150),
    Variant("B_fused_compile", "per-frame adaLN + compile, ckpt all", fused=True, compile=True, cost_s=60),
    Variant("C_full", "full fine-tuning, fp32 master + bf16 autocast, best B settings", mode="full", fused=True,
            compile=True, ckpt="auto", cost_s=120),
    Variant("B_best_704", "B_best at 704x1280", fused=True, compile=True, ckpt="auto", res="high", cost_s=150),
    Variant("B_best_b2", "B_best at batch 2", fused=True, compile=True, ckpt="auto", batch=2, cost_s=90),
    Variant("D_dora", "DoRA r32, best B settings", mode="dora", fused=True, compile=True, ckpt="auto", cost_s=110),
    Variant("B_fused_flash", "B_fused with SDPA flash", fused=True, attention="flash", cost_s=28, cuda_only=True),
    Variant("B_fused_efficient", "B_fused with SDPA mem-efficient", fused=True, attention="efficient", cost_s=30,
            cuda_only=True),
    Variant("B_fused_cudnn", "B_fused with SDPA cuDNN pinned", fused=True, attention="cudnn", cost_s=28,
            cuda_only=True),
    Variant("B_best_b4", "B_best at batch 4", fused=True, compile=True, ckpt="auto", batch=4, cost_s=120),
    Variant("B_best_fp8", "B_best + train.fp8 (torchao float8 training of the frozen base linears)", fused=True,
            compile=True, ckpt="auto", numerics=True, fp8=True, cost_s=110),
    Variant("B_cudagraphs", "B_best + CUDA graphs (reduce-overhead)", fused=True, compile=True, cuda_graphs=True,
            ckpt="auto", cost_s=120, cuda_only=True),
]
COMPILE_NEEDS_CUDA = True  # inductor on a 2-core CPU takes minutes: compiled rows run on CUDA only


@dataclass
class Shape:
    frames: int
    height: int
    width: int
    text_tokens: int

    @property
    def latent(self) -> tuple[int, int, int]:
        return (self.frames - 1) // 4 + 1, self.height // 8, self.width // 8


@dataclass
class Ctx:
    args: argparse.Namespace
    device: torch.device
    spec: object
    shapes: dict[str, Shape]
    peak_flops: float | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


# --------------------------------------------------------------------------------------- helpers
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> None:
    if device.type == "cuda":  # on a CPU the next variant simply reuses the heap (gc costs ~0.5 s there)
        gc.collect()
        torch.cuda.empty_cache()
    if "torch._dynamo" in sys.modules:  # importing dynamo costs seconds: only reset if something compiled
        try:
            torch._dynamo.reset()
        except Exception:  # noqa: BLE001 - resetting compile caches is best effort
            pass


def measure_peak_tflops(device: torch.device) -> float:
    """bf16 matmul rate on random data: 8192^3, 3 warm-ups, median of 10 (CUDA events)."""
    n = 8192
    a = torch.randn(n, n, device=device, dtype=BF16)
    b = torch.randn(n, n, device=device, dtype=BF16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del a, b
    return 2 * n**3 / statistics.median(times) / 1e12


def lora_settings(rank: int) -> types.SimpleNamespace:
    """The trainer's LoRA config fields (train.lora.*) without importing worldtune.config."""
    spec = get_spec("cosmos-predict2.5-2b")
    return types.SimpleNamespace(rank=rank, alpha=rank, dropout=0.0, targets=list(spec.lora_targets), init="default")


def randomise_lora_b(model: torch.nn.Module, seed: int = 7) -> None:
    """peft zero-inits lora_B, which makes every lora_A gradient zero; small random values make the
    numerics check see both (the step's cost does not change)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=gen) * 1e-3).to(p.device, p.dtype))


def prime_optimizer(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> None:
    """Allocate AdamW states and gradients now (lr 0: parameters unchanged), so that 'auto'
    checkpointing sees the memory they will take (25 GiB of states for full fine-tuning)."""
    lrs = [g["lr"] for g in opt.param_groups]
    for g in opt.param_groups:
        g["lr"] = 0.0
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    for g, lr in zip(opt.param_groups, lrs):
        g["lr"] = lr


def reset_checkpointing(model: torch.nn.Module) -> None:
    for block in model.transformer_blocks:
        block.__dict__.pop("forward", None)


def model_flops(ctx: Ctx, shape: Shape, batch: int) -> float:
    return float(train_step_flops(ctx.spec.transformer, shape.frames, shape.height, shape.width, batch=batch,
                                  text_tokens=shape.text_tokens, per_token_timestep=False))


# ------------------------------------------------------------------------------------ one step
def flow_step(model, opt, params, objective, x0, text, step: int, amp: bool, dtype) -> float:
    """One training step as the trainer runs it (prepare, forward under autocast, loss, backward,
    clip, AdamW); returns the loss."""
    speed.mark_step(model)
    fb = objective.prepare(x0, [sample_seed(0, step, i) for i in range(x0.shape[0])])
    with torch.autocast("cuda", dtype=BF16) if amp else nullcontext():
        pred = model(**transformer_inputs(fb, text, dtype))[0]
    loss = objective.loss(pred, fb)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def loss_and_grads(model, params, names, objective, x0, text, amp, dtype) -> tuple[float, dict]:
    """Loss and adapter gradients on a fixed batch (no optimizer step): the numerics probe."""
    fb = objective.prepare(x0, [sample_seed(123, 0, i) for i in range(x0.shape[0])])
    with torch.autocast("cuda", dtype=BF16) if amp else nullcontext():
        pred = model(**transformer_inputs(fb, text, dtype))[0]
    loss = objective.loss(pred, fb)
    loss.backward()
    grads = {n: (p.grad.detach().float().clone() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32))
             for n, p in zip(names, params)}
    for p in params:
        p.grad = None
    return float(loss.detach()), grads


def compare(ref: tuple[float, dict], new: tuple[float, dict]) -> dict:
    (l0, g0), (l1, g1) = ref, new
    num = sum(float((g0[k] - g1[k]).pow(2).sum()) for k in g0)
    den = sum(float(g0[k].pow(2).sum()) for k in g0)
    per = [float((g0[k] - g1[k]).norm() / g0[k].norm().clamp_min(1e-30)) for k in g0]
    return {"loss_eager": l0, "loss_fast": l1, "loss_rel_diff": abs(l1 - l0) / max(abs(l0), 1e-30),
            "grad_rel_diff_global": (num / max(den, 1e-30)) ** 0.5, "grad_rel_diff_max_tensor": max(per),
            "grad_rel_diff_median_tensor": statistics.median(per), "tensors": len(per)}


def timed(ctx: Ctx, fn, warmup: int, steps: int, log) -> tuple[list[float], float]:
    """Run warm-up then timed steps; returns the timed step seconds and the warm-up seconds."""
    t0 = time.perf_counter()
    for i in range(warmup):
        fn(i)
        sync(ctx.device)
        log(f"    warm-up {i + 1}/{warmup} done at {time.perf_counter() - t0:.1f} s")
    warm = time.perf_counter() - t0
    times = []
    for i in range(steps):
        sync(ctx.device)
        s = time.perf_counter()
        fn(warmup + i)
        sync(ctx.device)
        times.append(time.perf_counter() - s)
        log(f"    step {i + 1}/{steps}: {times[-1]:.3f} s")
    return times, warm


# ---------------------------------------------------------------------------------- the variants
def run_example(ctx: Ctx, v: Variant, row: dict, log) -> None:
    """A: what the diffusers example does each step, VAE and text projection included."""
    shape, dev = ctx.shapes[v.res], ctx.device
    dtype = BF16 if ctx.cuda else torch.float32
    torch.manual_seed(0)
    model = build_transformer(ctx.spec, dev, dtype)
    vae = build_vae(ctx.spec, dev, dtype).eval().requires_grad_(False)
    params = apply_training_mode(model, "lora", lora_settings(ctx.args.rank))
    model.enable_gradient_checkpointing()
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-3)
    gen = torch.Generator(device="cpu").manual_seed(1)
    pixels = (torch.rand(v.batch, 3, shape.frames, shape.height, shape.width, generator=gen) * 2 - 1).to(dev, dtype)
    raw = torch.randn(v.batch, shape.text_tokens, ctx.spec.text_embed_dim, generator=gen).to(dev, dtype)
    objective = FlowMatchingLoss()
    row["checkpointed_blocks"] = len(model.transformer_blocks)
    vae_times: list[float] = []

    def step(i: int) -> None:
        sync(dev)
        s = time.perf_counter()
        x0 = encode(vae, pixels)
        sync(dev)
        vae_times.append(time.perf_counter() - s)
        flow_step(model, opt, params, objective, x0, raw, i, ctx.cuda, dtype)

    row["step_times"], row["warmup_s"] = timed(ctx, step, ctx.args.warmup, ctx.args.steps, log)
    row["vae_encode_s"] = statistics.median(vae_times[ctx.args.warmup:] or vae_times)
    row["text_encoder"] = "excluded (Qwen 7B, 0.04 s/step measured); crossattn_proj on raw embeddings included"


def run_flow(ctx: Ctx, v: Variant, row: dict, log) -> None:
    """B, C, D: worldtune's step from cached latents with the variant's switches."""
    shape, dev = ctx.shapes[v.res], ctx.device
    t, h, w = shape.latent
    full = v.mode == "full"
    base_dtype = torch.float32 if (full or not ctx.cuda) else BF16
    dtype = BF16 if ctx.cuda else torch.float32
    torch.manual_seed(0)
    model = build_transformer(ctx.spec, dev, base_dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x0 = torch.randn(v.batch, 16, t, h, w, generator=gen).to(dev)
    if full:  # full fine-tuning trains crossattn_proj, so it needs the raw embeddings
        text = torch.randn(v.batch, shape.text_tokens, ctx.spec.text_embed_dim, generator=gen).to(dev, dtype)
    else:  # adapters: the projected embedding is cached, as the trainer does with a projected cache
        if hasattr(model, "crossattn_proj"):  # Predict2 (T5) has no projection: its text is already 1024-d
            model.crossattn_proj = torch.nn.Identity()
        text = torch.randn(v.batch, shape.text_tokens, ctx.spec.transformer["text_embed_dim"],
                           generator=gen).to(dev, dtype)
    params = apply_training_mode(model, v.mode, lora_settings(ctx.args.rank))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if not full:
        randomise_lora_b(model)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-3, fused=ctx.cuda or None)
    objective = FlowMatchingLoss()
    n_blocks = len(model.transformer_blocks)
    if v.numerics:
        apply_checkpointing(model, list(range(n_blocks)) if ctx.cuda else [])
        ref = loss_and_grads(model, params, names, objective, x0, text, ctx.cuda, dtype)
        reset_checkpointing(model)
        log(f"    eager reference loss {ref[0]:.6f}")
    prime_optimizer(opt, params)
    per_block = speed.per_block_bytes(ctx.spec, t, h, w, v.batch, v.mode, v.fused, ctx.args.rank, shape.text_tokens)
    blocks = choose_checkpointing("all" if v.ckpt == "sac" else v.ckpt, n_blocks, dev, per_block)
    opt.zero_grad(set_to_none=True)
    (speed.apply_selective_checkpointing if v.ckpt == "sac" else apply_checkpointing)(model, blocks)
    row["checkpointed_blocks"] = len(blocks)
    row["per_block_estimate_gib"] = per_block / GIB
    if v.fp8:  # before compiling, as the trainer does
        from worldtune.models.float8 import float8_training

        row["fp8_linears"] = float8_training(model, dev, "train.fp8")
    row["speed"] = speed.apply_speed(model, fused_adaln=v.fused, compile=v.compile, cuda_graphs=v.cuda_graphs,
                                     attention=v.attention)
    log(f"    checkpointing {len(blocks)}/{n_blocks} blocks (estimate {per_block / GIB:.2f} GiB per kept block)")
    if v.numerics:
        t0 = time.perf_counter()
        new = loss_and_grads(model, params, names, objective, x0, text, ctx.cuda, dtype)
        row["numerics"] = compare(ref, new)
        row["numerics"]["first_call_s"] = time.perf_counter() - t0
        log(f"    numerics vs eager: {row['numerics']}")
        del ref, new
    row["step_times"], row["warmup_s"] = timed(
        ctx, lambda i: flow_step(model, opt, params, objective, x0, text, i, ctx.cuda, dtype),
        ctx.args.warmup if v.res == "low" else 1, ctx.args.steps if v.res == "low" else max(2, ctx.args.steps // 2), log)
    row["trainable_params"] = sum(p.numel() for p in params)
    if v.compile:
        from torch._dynamo.utils import counters

        row["dynamo_unique_graphs"] = int(counters["stats"]["unique_graphs"])


def run_sdpa(ctx: Ctx, v: Variant, row: dict, log) -> None:
    """Self-attention alone at the real shape: forward and backward per SDPA kernel."""
    from torch.nn.attention import sdpa_kernel

    shape = ctx.shapes["low"]
    t, h, w = shape.latent
    n = t * (h // 2) * (w // 2)
    heads, hd = ctx.spec.transformer["num_attention_heads"], ctx.spec.transformer["attention_head_dim"]
    q, k, val = (torch.randn(1, heads, n, hd, device=ctx.device, dtype=BF16, requires_grad=True) for _ in range(3))
    g = torch.randn(1, heads, n, hd, device=ctx.device, dtype=BF16)
    fwd_flops = 4 * n * n * hd * heads
    row["kernels"] = {}
    for name in ("cudnn", "flash", "efficient"):
        try:
            with sdpa_kernel([speed.sdpa_backend(name)]):
                fwd, bwd = [], []
                for i in range(7):
                    s0, s1, s2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                    s0.record()
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, val)
                    s1.record()
                    out.backward(g)
                    s2.record()
                    s2.synchronize()
                    if i >= 2:
                        fwd.append(s0.elapsed_time(s1) / 1e3)
                        bwd.append(s1.elapsed_time(s2) / 1e3)
                    q.grad = k.grad = val.grad = None
            f, b = statistics.median(fwd), statistics.median(bwd)
            row["kernels"][name] = {"fwd_ms": f * 1e3, "bwd_ms": b * 1e3, "fwd_tflops": fwd_flops / f / 1e12,
                                    "bwd_tflops": 2.5 * fwd_flops / b / 1e12,
                                    "per_step_s_28_layers_full_recompute": 28 * (2 * f + b)}
            log(f"    {name}: fwd {f * 1e3:.1f} ms, bwd {b * 1e3:.1f} ms")
        except Exception as e:  # noqa: BLE001 - a kernel that refuses this shape is a result
            row["kernels"][name] = {"error": str(e).splitlines()[0][:200]}


RUNNERS = {"example": run_example, "flow": run_flow, "sdpa": run_sdpa}


def run_variant(ctx: Ctx, v: Variant, log) -> dict:
    shape = ctx.shapes[v.res]
    row = {**{k: val for k, val in asdict(v).items() if k not in ("cost_s",)},
           "frames": shape.frames, "height": shape.height, "width": shape.width, "status": "ok"}
    if (v.cuda_only or v.cuda_graphs or v.attention in ("cudnn", "flash")) and not ctx.cuda:
        row["status"] = "skipped: CUDA only"
        return row
    if v.compile and COMPILE_NEEDS_CUDA and not ctx.cuda:
        v = replace(v, compile=False)
        row["compile"], row["note"] = False, "compile left off on CPU"
    free_memory(ctx.device)
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        counters.clear()
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    t0 = time.perf_counter()
    try:
        RUNNERS[v.kind](ctx, v, row, log)
    except torch.OutOfMemoryError:
        row["status"] = "OOM"
    except Exception as e:  # noqa: BLE001 - one broken variant must not lose the others
        row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        traceback.print_exc()
    row["wall_s"] = time.perf_counter() - t0
    if ctx.cuda:
        row["peak_gib"] = torch.cuda.max_memory_allocated(ctx.device) / GIB
    times = row.get("step_times")
    if times and row["status"] == "ok":
        med = statistics.median(times)
        row["median_s"] = med
        row["samples_per_s"] = v.batch / med
        flops = model_flops(ctx, shape, v.batch)
        row["model_tflop_per_step"] = flops / 1e12
        if ctx.peak_flops:
            row["mfu"] = flops / med / ctx.peak_flops
    free_memory(ctx.device)
    return row


# ------------------------------------------------------------------------------------- reporting
def meta(ctx: Ctx) -> dict:
    import diffusers
    import peft

    m = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version(),
         "torch": torch.__version__, "diffusers": diffusers.__version__, "peft": peft.__version__,
         "device": torch.cuda.get_device_name(ctx.device) if ctx.cuda else platform.processor() or "cpu",
         "spec": ctx.spec.name, "shapes": {k: asdict(s) for k, s in ctx.shapes.items()},
         "lora_rank": ctx.args.rank, "warmup": ctx.args.warmup, "steps": ctx.args.steps,
         "flops_convention": "3 x forward, adaLN modulation per frame (models/flops.py per_token_timestep=False)"}
    if ctx.cuda:
        m["cudnn"] = torch.backends.cudnn.version()
        m["cuda"] = torch.version.cuda
    return m


def fmt(x, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def table(rows: list[dict]) -> str:
    base = next((r.get("median_s") for r in rows if r["name"] == "A_example" and r.get("median_s")), None)
    lines = [f"{'variant':20} {'s/step':>7} {'samp/s':>7} {'peak GiB':>8} {'MFU':>5} {'vs A':>5} {'ckpt':>4}  status / what"]
    for r in rows:
        if r["kind"] == "sdpa":
            ks = r.get("kernels", {})
            desc = ", ".join(f"{k} {d['fwd_ms']:.0f}+{d['bwd_ms']:.0f} ms" if "fwd_ms" in d else f"{k} err"
                             for k, d in ks.items())
            lines.append(f"{r['name']:20} {'':>7} {'':>7} {'':>8} {'':>5} {'':>5} {'':>4}  {r['status']}: {desc}")
            continue
        med = r.get("median_s")
        vs = base / med if (base and med) else None
        mfu = f"{r['mfu'] * 100:4.0f}%" if r.get("mfu") else "-"
        lines.append(f"{r['name']:20} {fmt(med, '7.3f'):>7} {fmt(r.get('samples_per_s'), '7.3f'):>7} "
                     f"{fmt(r.get('peak_gib'), '8.1f'):>8} {mfu:>5} {fmt(vs, '5.2f'):>5} "
                     f"{fmt(r.get('checkpointed_blocks'), 'd'):>4}  {r['status'] if r['status'] != 'ok' else r['what']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ main
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny spec and shapes (CPU smoke test)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="train_bench.json", help="JSON results, rewritten after every variant")
    p.add_argument("--only", default="", help="comma-separated variant names (default: all, in priority order)")
    p.add_argument("--skip", default="", help="comma-separated variant names to leave out")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 2; tiny 1)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 4; tiny 2); half at 704x1280")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--model", default="cosmos-predict2.5-2b",
                   help="registry spec of the real-size model (e.g. cosmos-predict2-14b for issue 6's LoRA step)")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="skip a variant whose rough cost would end past this many seconds (0 = no limit)")
    p.add_argument("--list", action="store_true", help="print the variants and exit")
    a = p.parse_args(argv)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.tiny else 2)
    a.steps = a.steps if a.steps is not None else (2 if a.tiny else 4)
    return a


def select(args: argparse.Namespace) -> list[Variant]:
    names = {v.name for v in VARIANTS}
    only = [s for s in args.only.split(",") if s]
    skip = {s for s in args.skip.split(",") if s}
    unknown = [s for s in [*only, *skip] if s not in names]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}: choose from {', '.join(sorted(names))}")
    chosen = [v for v in VARIANTS if (not only or v.name in only) and v.name not in skip]
    return chosen


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        for v in VARIANTS:
            print(f"{v.name:20} ~{v.cost_s:4.0f} s  {v.what}")
        return 0
    device = torch.device(args.device)
    if args.tiny:
        spec = get_spec("tiny-predict2.5")
        shapes = {"low": Shape(9, 32, 48, 16), "high": Shape(9, 48, 80, 16)}
    else:
        spec = get_spec(args.model)
        shapes = {"low": Shape(93, 432, 768, 512), "high": Shape(93, 704, 1280, 512)}
    ctx = Ctx(args, device, spec, shapes)
    variants = select(args)
    out = Path(args.out)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    results: dict = {"meta": meta(ctx), "peak_tflops": None, "rows": []}

    def write() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str))

    if ctx.cuda:
        results["peak_tflops"] = measure_peak_tflops(device)
        ctx.peak_flops = results["peak_tflops"] * 1e12
        log(f"bf16 matmul 8192^3: {results['peak_tflops']:.0f} TFLOP/s on {results['meta']['device']}")
    write()
    for v in variants:
        elapsed = time.perf_counter() - t_start
        if args.budget_s and not args.tiny and elapsed + v.cost_s > args.budget_s:
            row = {**asdict(v), "status": f"skipped: time budget ({elapsed:.0f} s used, ~{v.cost_s:.0f} s needed)"}
            log(f"{v.name}: {row['status']}")
        else:
            log(f"{v.name}: {v.what}")
            row = run_variant(ctx, v, log)
            log(f"{v.name}: {row['status']}" + (f", {row['median_s']:.3f} s/step" if row.get("median_s") else "")
                + (f", peak {row['peak_gib']:.1f} GiB" if row.get("peak_gib") else ""))
        results["rows"].append(row)
        write()
    print(table(results["rows"]), flush=True)
    log(f"done; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
