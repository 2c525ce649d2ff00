"""`worldtune model info`: what a model costs before you spend a GPU-hour on it.

Prints parameters, adapter parameters, the latent shape and token count of a clip, FLOPs per
forward and per training step, and activation memory with and without gradient checkpointing;
with `plan=True`, the memory planner's verdict with its arithmetic. Works on registry names and on
local diffusers directories (their transformer config.json), without loading any weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from worldtune.errors import ModelError
from worldtune.models.flops import forward_flops, latent_shape
from worldtune.models.memory import GIB, estimate_activations, plan as make_plan
from worldtune.models.params import count_transformer_params
from worldtune.models.registry import ModelSpec, get_spec

H200_BF16_FLOPS = 790e12  # measured dense bf16 matmul rate of one H200 (docs/benchmarks.md)


def resolve(name_or_path: str, revision: str | None = None) -> ModelSpec:
    """A registry name; or, as `model.path` takes them, a diffusers directory or a hub id (`org/name`, read from
    the local Hugging Face cache at `revision`), described by its configs (no weights read)."""
    from worldtune.models.load import HUB_ID, resolve_spec

    if Path(name_or_path).expanduser().is_dir() or HUB_ID.fullmatch(name_or_path):
        return resolve_spec(path=name_or_path, revision=revision)
    if "/" in name_or_path or name_or_path.startswith("."):
        raise ModelError(f"model directory {name_or_path} does not exist: pass a registry name, an existing folder, "
                         "or a hub id (org/name) in the local Hugging Face cache")
    return get_spec(name_or_path)


def _fmt_flops(x: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} FLOP"


def _fmt_count(x: int) -> str:
    return f"{x / 1e9:.2f} B" if x >= 1e9 else f"{x / 1e6:.1f} M" if x >= 1e6 else f"{x:,}"


def model_numbers(spec: ModelSpec, frames: int, height: int, width: int, batch: int = 1, lora_rank: int = 32,
                  mode: str = "lora", per_token_timestep: bool = True) -> dict[str, Any]:
    """Every number `model info` prints, as a dict (the CLI table and tests both read it)."""
    from worldtune.models.family import family_of

    own = family_of(spec).info_numbers(frames, height, width, batch, lora_rank, mode)
    if own is not None:
        return own
    cfg = spec.transformer
    pc = count_transformer_params(cfg, spec.lora_targets, lora_rank)
    shape = latent_shape(cfg, frames, height, width)
    fwd = forward_flops(cfg, frames, height, width, batch, spec.max_sequence_length, per_token_timestep)
    act_mode = mode if mode in ("lora", "dora", "full") else "lora"
    layers = int(cfg["num_layers"])
    acts = {n: estimate_activations(cfg, frames, height, width, batch, act_mode, lora_rank, n,
                                    spec.max_sequence_length, per_token_timestep).total for n in (0, layers)}
    return {
        "model": spec.name, "family": spec.family, "frames": frames, "height": height, "width": width,
        "batch": batch, "params": pc.total, "lora_rank": lora_rank, "lora_params": pc.lora,
        "dora_params": pc.adapter(dora=True), "lora_modules": pc.targeted_modules,
        "latent_shape": (int(cfg["out_channels"]), shape.frames, shape.height, shape.width),
        "tokens": shape.tokens, "text_tokens": spec.max_sequence_length,
        "forward_flops": fwd.total, "attention_share": fwd.attention_share,
        "train_step_flops": 3 * fwd.total, "flop_parts": dict(fwd.parts),
        "activation_bytes_no_ckpt": acts[0], "activation_bytes_full_ckpt": acts[layers], "mode": act_mode,
    }


def _numbers_table(n: dict[str, Any]) -> Table:
    t = Table(title=f"{n['model']} ({n['family']}): {n['batch']} x {n['frames']} frames x {n['height']}x{n['width']}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("transformer parameters", _fmt_count(n["params"]))
    t.add_row(f"LoRA parameters (r={n['lora_rank']}, {n['lora_modules']} Linear layers)", _fmt_count(n["lora_params"]))
    t.add_row("DoRA parameters (LoRA + magnitudes)", _fmt_count(n["dora_params"]))
    t.add_row("latent shape (C, T, H, W)", " x ".join(str(x) for x in n["latent_shape"]))
    t.add_row("tokens per clip (video / text)", f"{n['tokens']:,} / {n['text_tokens']}")
    t.add_row("FLOPs per forward", f"{_fmt_flops(n['forward_flops'])} ({n['attention_share']:.0%} attention)")
    t.add_row("FLOPs per train step (3x forward)", _fmt_flops(n["train_step_flops"]))
    t.add_row("train step at 100% of an H200 (790 TFLOP/s)", f"{n['train_step_flops'] / H200_BF16_FLOPS:.2f} s")
    for label, key in (("no checkpointing", "activation_bytes_no_ckpt"),
                       ("every block checkpointed", "activation_bytes_full_ckpt")):
        value = n.get(key)
        t.add_row(f"activations, {n['mode']}, {label}", "not modelled" if value is None else f"{value / GIB:.2f} GiB")
    return t


def _plan_table(p: Any) -> Table:
    verdict = "[green]fits[/]" if p.fits else "[red]does NOT fit[/]"
    kind = " selectively (attention outputs kept)" if p.selective else ""
    t = Table(title=(f"{p.mode} on {p.gpus} x {p.gpu_mem_gib:g} GiB: {verdict} — sharding {p.sharding}, "
                     f"{p.checkpointed_blocks}/{p.layers} blocks checkpointed{kind}, "
                     f"offload {'on' if p.offload else 'off'}"))
    t.add_column("per GPU")
    t.add_column("GiB", justify="right")
    t.add_column("arithmetic")
    for line in p.lines:
        t.add_row(line.item, f"{line.gib:.2f}", line.arithmetic)
    t.add_row("[bold]total[/]", f"[bold]{p.total_gib:.2f}[/]", f"usable {p.usable_gib:.1f} GiB (card minus context, 5% fragmentation)")
    if p.cpu_gib:
        t.add_row("host memory per GPU (offload)", f"{p.cpu_gib:.2f}", "")
    return t


def print_info(name_or_path: str, frames: int | None = None, height: int | None = None, width: int | None = None,
               batch: int = 1, lora_rank: int = 32, mode: str = "lora", plan: bool = False, gpus: int = 1,
               gpu_mem: float = 141.0, grad_checkpointing: str = "auto", memory_auto: bool = False,
               console: Console | None = None, revision: str | None = None, action_steps: int = 0,
               text_tokens: int | None = None) -> dict[str, Any]:
    """Print the model's numbers (and with `plan`, the memory plan) and return them as a dict.

    The plan assumes the trainer's CUDA defaults (per-frame adaLN, compiled blocks) and its
    `train.grad_checkpointing` / `train.memory_auto` settings; `action_steps` plans an action run (forward or
    inverse dynamics) of that many action tokens per clip.
    """
    spec = resolve(name_or_path, revision)
    frames, height, width = frames or spec.num_frames, height or spec.height, width or spec.width
    console = console or Console()
    numbers = model_numbers(spec, frames, height, width, batch, lora_rank, mode)
    console.print(_numbers_table(numbers))
    if plan:  # a family the planner does not model for this mode says so itself
        p = make_plan(spec, mode, frames, height, width, batch=batch, gpus=gpus, gpu_mem_gb=gpu_mem,
                      lora_rank=lora_rank, grad_checkpointing=grad_checkpointing, memory_auto=memory_auto,
                      text_tokens=text_tokens, action_steps=action_steps)
        console.print(_plan_table(p))
        if p.note:
            console.print(f"[red]why:[/] {p.note}")
        numbers["plan"] = p
    return numbers
