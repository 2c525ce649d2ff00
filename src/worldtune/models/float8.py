"""Float8 (e4m3) matmuls through torchao: labelled speed options for generation, serving and training.

Why an option and not a default: e4m3 keeps 3 mantissa bits, so the frames move further from the bf16 model's than
another correct attention kernel moves them; the option has its own quality figure beside its speed figure
(docs/benchmarks.md) and is never on unless asked for.

Why torchao: it is PyTorch's own library for low-precision arithmetic and keeps the kernels, the scaling recipes and
their compile support up to date; worldtune only chooses which layers change.

- Inference (`generate.fp8`, `serve.fp8`): torchao's dynamic float8 quantisation with row-wise scales: each weight
  is quantised once, one scale per output channel; each activation at every call, one scale per token; the product
  is written in the activation's dtype.
- Training (`train.fp8`): torchao's float8 training (`convert_to_float8_training`, row-wise recipe by default): the
  linears keep their high-precision weights and cast operands to e4m3 in the forward and the backward pass.

Only plain linears inside the transformer's repeated blocks change, and only those whose sizes are multiples of 16
(the float8 GEMM's requirement), so the embeddings and the output projection keep full precision. An adapter keeps
its own layers at full precision: a LoRA's base layer (peft's `base_layer`, which only calls it) changes; for
inference a DoRA's base layer stays as it is (DoRA reads the base weight itself, and a quantised weight is not a
plain tensor), for training it changes too (the float8 training layer keeps its weight as a plain tensor).

torchao refuses float8 inference off CUDA GPUs of compute capability 8.9 (Ada, Hopper and later), so worldtune
refuses float8 there too, for every stage alike, in one line before any layer changes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from worldtune.errors import ConfigError

INSTALL = "pip install 'worldtune[fp8]'"
MIN_CAPABILITY = (8, 9)  # Ada, Hopper and later have float8 tensor cores


def _torchao(option: str) -> Any:
    """The torchao module, or a one-line error naming the option and the install command."""
    try:
        import torchao
    except ImportError:
        raise ConfigError(f"{option}: float8 runs through torchao, which is not installed: {INSTALL} "
                          f"(or turn {option} off)") from None
    return torchao


def check_float8_device(device: torch.device, option: str) -> None:
    """A one-line error naming `option` where `device` has no float8 matmul: the CPU, or a CUDA GPU before compute
    capability 8.9."""
    if device.type != "cuda":
        raise ConfigError(f"{option}: float8 needs a CUDA GPU of compute capability 8.9 or later (Ada, Hopper); "
                          f"this run is on {device.type}: turn {option} off")
    if (capability := torch.cuda.get_device_capability(device)) < MIN_CAPABILITY:
        raise ConfigError(f"{option}: float8 needs a GPU of compute capability 8.9 or later (Ada, Hopper); "
                          f"{torch.cuda.get_device_name(device)} is {'.'.join(map(str, capability))}: "
                          f"turn {option} off")


def _float8_linears(transformer: nn.Module, keep_dora_base: bool) -> list[nn.Linear]:
    """The blocks' plain linears of float8-able sizes that are not an adapter's own layers (nor, with
    `keep_dora_base`, a DoRA layer's base)."""
    from worldtune.models.speed import repeated_blocks

    chosen = []
    for block in repeated_blocks(transformer):
        parents = dict(block.named_modules())
        for name, m in parents.items():
            if type(m) is not nn.Linear or m.in_features % 16 or m.out_features % 16 or "lora_" in name:
                continue
            parent_name, _, child = name.rpartition(".")
            dora = any(getattr(parents.get(parent_name), "use_dora", {}).values())
            if not (keep_dora_base and child == "base_layer" and dora):
                chosen.append(m)
    return chosen


def quantize_blocks(transformer: nn.Module, device: torch.device, option: str) -> int:
    """Float8 inference for the transformer's blocks (see the module's docstring), in place; returns how many
    linears changed. One-line errors (`option` names the setting) where torchao or the device cannot."""
    _torchao(option)
    check_float8_device(device, option)
    return _quantize(_float8_linears(transformer, keep_dora_base=True), transformer)


def _quantize(linears: list[nn.Linear], transformer: nn.Module) -> int:
    """torchao's dynamic row-wise float8 on exactly `linears` (cast to bf16 first: torchao's row-wise weights start
    from bf16, and e4m3 is far coarser than bf16, so the cast changes nothing that survives)."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

    ids = {id(m) for m in linears}
    for m in linears:
        m.to(torch.bfloat16)
    # set_inductor_config=False: compiled blocks keep the compiler settings the rest of worldtune uses
    config = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow(), set_inductor_config=False)
    quantize_(transformer, config, filter_fn=lambda m, fqn: id(m) in ids)
    return len(linears)


def float8_training(transformer: nn.Module, device: torch.device, option: str = "train.fp8",
                    recipe: str = "rowwise") -> int:
    """torchao's float8 training for the transformer's blocks (see the module's docstring), in place, before the
    blocks are compiled or sharded; returns how many linears changed. `recipe` is one of torchao's
    (`Float8LinearRecipeName`: tensorwise, rowwise, rowwise_with_gw_hp)."""
    _torchao(option)
    check_float8_device(device, option)
    return _convert_for_training(_float8_linears(transformer, keep_dora_base=False), transformer, recipe)


def _convert_for_training(linears: list[nn.Linear], transformer: nn.Module, recipe: str) -> int:
    """`convert_to_float8_training` on exactly `linears`; inner dimensions padded to 16 (a step's token count is
    the inner dimension of the weight gradient's GEMM)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    ids = {id(m) for m in linears}
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), pad_inner_dim=True)
    convert_to_float8_training(transformer, module_filter_fn=lambda m, fqn: id(m) in ids, config=config)
    return len(linears)
