"""FP8 (e4m3) matmuls for a transformer's linear layers: a labelled speed option whose frames are not the bf16
model's.

Why an option and not a default: a bf16 Cosmos transformer at generation shapes already runs near the GPU's bf16
peak (docs/benchmarks.md), so the remaining speed is in cheaper arithmetic. FP8 halves the bytes and doubles the
tensor-core rate of each matmul, at the cost of e4m3's 3-bit mantissa: the frames move further from the bf16
model's than another correct attention kernel moves them, so the option has its own quality figure beside its
speed figure and is never on unless asked for.

The scheme is the usual dynamic row-wise one (as in torchao's float8 inference): each weight is quantised once,
one scale per output channel; each activation is quantised at every call, one scale per token; both scales map the
row's absolute maximum to e4m3's largest value, and `torch._scaled_mm` multiplies the two and writes the model's
dtype. Only plain `nn.Linear`s inside the transformer's repeated blocks change, so the embeddings and the output
projection keep full precision. An adapter keeps its own layers at full precision: a LoRA's base layer (peft's
`base_layer`, which only calls it) becomes FP8, a DoRA's stays as it is (DoRA reads the base weight itself).
"""

from __future__ import annotations

import torch
from torch import nn

from worldtune.errors import ConfigError

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 tensor, float32 scale [rows, 1]) of a 2-D tensor, one scale per row: row = scale * e4m3 row."""
    amax = x.detach().abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / E4M3_MAX
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


class Float8Linear(nn.Module):
    """An `nn.Linear` whose matmul runs in e4m3 with row-wise scales (weights per output channel, activations per
    token); output in the original weight's dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.out_dtype = linear.weight.dtype
        weight, scale = quantize_rows(linear.weight.data)
        self.register_buffer("weight_fp8", weight)  # [out, in]: its .t() is the column-major operand _scaled_mm wants
        self.register_buffer("weight_scale", scale.reshape(1, -1).contiguous())  # [1, out]
        self.register_buffer("bias", None if linear.bias is None else linear.bias.data.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, self.in_features)
        n = rows.shape[0]
        pad = -n % 16  # CUDA's FP8 GEMM wants every dimension a multiple of 16
        if pad:
            rows = torch.nn.functional.pad(rows, (0, 0, 0, pad))
        q, scale = quantize_rows(rows)
        out = torch._scaled_mm(q, self.weight_fp8.t(), scale_a=scale, scale_b=self.weight_scale,
                               out_dtype=self.out_dtype)
        if pad:
            out = out[:n]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3 row-wise"


def _convertible(name: str, m: nn.Module, parents: dict[str, nn.Module]) -> bool:
    """A plain linear of FP8-able sizes that is not an adapter's own layer nor a DoRA layer's base."""
    if type(m) is not nn.Linear or m.in_features % 16 or m.out_features % 16 or "lora_" in name:
        return False
    parent_name, _, child = name.rpartition(".")
    parent = parents.get(parent_name)
    return child != "base_layer" or not any(getattr(parent, "use_dora", {}).values())


def quantize_linears(blocks: nn.Module) -> int:
    """Replace every plain `nn.Linear` under `blocks` (a transformer's repeated layers) whose sizes are multiples of
    16 by a `Float8Linear`, in place (adapters: see the module's docstring); returns how many were replaced."""
    parents = dict(blocks.named_modules())
    swaps = [(name, m) for name, m in parents.items() if _convertible(name, m, parents)]
    for name, m in swaps:
        parent_name, _, child = name.rpartition(".")
        setattr(parents[parent_name] if parent_name else blocks, child, Float8Linear(m))
    return len(swaps)


def apply_fp8(transformer: nn.Module, device: torch.device, option: str) -> int:
    """`quantize_blocks`, or a one-line error naming `option` (the setting that asked for it) on a CUDA GPU before
    compute capability 8.9 (Ada, Hopper and later have FP8 tensor cores); returns how many linears were replaced."""
    if device.type == "cuda" and (capability := torch.cuda.get_device_capability(device)) < (8, 9):
        raise ConfigError(f"{option}: fp8 needs a GPU of compute capability 8.9 or later (Ada, Hopper); "
                          f"{torch.cuda.get_device_name(device)} is {'.'.join(map(str, capability))}: turn fp8 off")
    return quantize_blocks(transformer)


def quantize_blocks(transformer: nn.Module) -> int:
    """`quantize_linears` on each of the transformer's repeated blocks (models/speed.py `repeated_blocks`): the
    layers that carry nearly all of its matmuls; returns how many linears were replaced."""
    from worldtune.models.speed import repeated_blocks

    return sum(quantize_linears(block) for block in repeated_blocks(transformer))
