"""LoRA adapters for generation: check them against the base model, load them by name, switch.

An adapter folder is what training's export writes (and what diffusers' `save_lora_weights`
writes): `pytorch_lora_weights.safetensors` with keys `transformer.<module>.lora_A.weight` /
`lora_B.weight` (DoRA adds `lora_magnitude_vector`) and the LoRA metadata (rank, alpha, targets)
in the file header. Every adapter is checked BEFORE anything is generated: its keys must name
Linear modules of this transformer and its shapes must fit them, so an adapter trained on another
base model (other hidden size, other depth) is a one-line error instead of a crash or, worse, a
silently half-applied adapter. Shapes alone cannot tell Predict2 from Predict2.5 (they share
module names and sizes), so the base-model facts `worldtune export` records in
`worldtune_adapter.json` (the family's `adapter_info`: family, width, depth) are checked too when
the folder has one. Several adapters are loaded side by side under their names, so a
run compares them (and the base model) without reloading anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from worldtune.errors import GenerationError

WEIGHTS = "pytorch_lora_weights.safetensors"
SIDECAR = "worldtune_adapter.json"
_SUFFIXES = (".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector", ".lora_B.bias")


@dataclass(frozen=True)
class AdapterFile:
    """A checked adapter: where it is, under which name, at which scale, and its LoRA rank."""

    name: str
    path: Path  # the folder
    file: Path  # the safetensors file
    scale: float
    prefix: str | None  # "transformer" for pipeline-format files, None for bare peft keys
    rank: int
    num_modules: int


def adapter_file(path: str | Path) -> Path:
    """The weights file of an adapter folder (or the file itself)."""
    p = Path(path)
    f = p / WEIGHTS if p.is_dir() else p
    if not f.is_file():
        raise GenerationError(f"adapter {p}: no {WEIGHTS} there; point generate.adapters.path at the folder "
                              f"`worldtune export` wrote")
    return f


def check_base(weights: Path, base: Mapping[str, Any]) -> None:
    """Refuse an adapter whose `worldtune_adapter.json` records another base model than `base` (the
    family's `adapter_info()`): another family first, then any other recorded fact (width, depth)."""
    import json

    side = weights.parent / SIDECAR
    if not side.is_file():
        return  # an adapter from elsewhere (diffusers' own export): the shape check is all we have
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
        trained_on = meta.get("family")
    except (OSError, ValueError, AttributeError) as e:
        raise GenerationError(f"adapter {side}: cannot be read ({type(e).__name__}); re-export the adapter") from None
    if trained_on and trained_on != base.get("family"):
        raise GenerationError(f"adapter {weights.parent}: trained on a {trained_on} model ({meta.get('base_model')}) "
                              f"but the base model is {base.get('family')}; use an adapter trained on this model family")
    for key, want in base.items():
        if key not in ("base_model", "family") and meta.get(key, want) != want:
            raise GenerationError(f"adapter {weights.parent}: trained on {meta.get('base_model')} with {key} = "
                                  f"{meta[key]} but the base model has {want}; use an adapter trained on this model")


def check_adapter(path: str | Path, transformer: torch.nn.Module, name: str, scale: float = 1.0,
                  base: Mapping[str, Any] | None = None) -> AdapterFile:
    """Read only the header (keys and shapes) and check it fits `transformer` (and `base`, the family's
    `adapter_info()`, when the adapter records its base model); raise GenerationError if not."""
    from safetensors import safe_open

    f = adapter_file(path)
    if base is not None:
        check_base(f, base)
    try:
        with safe_open(str(f), framework="pt") as sf:
            shapes = {k: tuple(sf.get_slice(k).get_shape()) for k in sf.keys()}
    except Exception as e:  # safetensors raises its own error types for a bad header
        raise GenerationError(f"adapter {f}: not a readable safetensors file ({str(e).splitlines()[0]})") from None
    prefix = "transformer" if any(k.startswith("transformer.") for k in shapes) else None
    if prefix:
        shapes = {k[len("transformer."):]: v for k, v in shapes.items() if k.startswith("transformer.")}
    linears = _linear_modules(transformer)
    ranks: set[int] = set()
    modules: set[str] = set()
    for key, shape in shapes.items():
        module, kind = _split_key(key)
        if module is None:
            raise GenerationError(f"adapter {f}: key '{key}' is not a LoRA weight; export the adapter with "
                                  f"`worldtune export` or diffusers' save_lora_weights")
        lin = linears.get(module)
        if lin is None:
            raise GenerationError(f"adapter {f}: module '{module}' does not exist in this base model "
                                  f"(made for another model?); use an adapter trained on this base model")
        want = _expected_shape(kind, lin, shape)
        if tuple(shape) != want:
            raise GenerationError(f"adapter {f}: '{key}' has shape {list(shape)} but this base model needs "
                                  f"{list(want)} (made for another model size?); use an adapter trained on this base")
        if kind == ".lora_A.weight":
            ranks.add(shape[0])
        modules.add(module)
    if not modules:
        raise GenerationError(f"adapter {f}: holds no transformer LoRA weights")
    return AdapterFile(name=name, path=Path(path), file=f, scale=scale, prefix=prefix,
                       rank=max(ranks) if ranks else 0, num_modules=len(modules))


def _linear_modules(transformer: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """Linear modules by name; a layer already wrapped by peft is looked through to its base layer."""
    out: dict[str, torch.nn.Linear] = {}
    for name, mod in transformer.named_modules():
        base = getattr(mod, "base_layer", mod)
        if isinstance(base, torch.nn.Linear) and ".base_layer" not in name and ".lora_" not in name:
            out[name] = base
    return out


def _split_key(key: str) -> tuple[str | None, str]:
    for suffix in _SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)], suffix
    return None, ""


def _expected_shape(kind: str, lin: torch.nn.Linear, shape: tuple[int, ...]) -> tuple[int, ...]:
    rank = shape[0] if kind == ".lora_A.weight" else (shape[1] if len(shape) > 1 else 0)
    return {
        ".lora_A.weight": (rank, lin.in_features),
        ".lora_B.weight": (lin.out_features, rank),
        ".lora_magnitude_vector": (lin.out_features,),
        ".lora_B.bias": (lin.out_features,),
    }[kind]


def load_adapters(transformer: torch.nn.Module, adapters: list[AdapterFile]) -> None:
    """Inject every adapter under its own name (all checked first, so this does not fail half-way)."""
    for a in adapters:
        try:
            transformer.load_lora_adapter(str(a.path if a.file.name == WEIGHTS else a.file.parent),
                                          weight_name=a.file.name, prefix=a.prefix, adapter_name=a.name,
                                          local_files_only=True)
        except (ValueError, KeyError, RuntimeError) as e:
            raise GenerationError(f"adapter {a.file}: cannot be loaded ({str(e).splitlines()[0]})") from None


def activate(transformer: torch.nn.Module, adapter: AdapterFile | None, loaded: bool) -> None:
    """Run the base model (adapter None) or exactly one adapter at its scale."""
    if not loaded:
        return
    if adapter is None:
        transformer.disable_lora()
    else:
        transformer.enable_lora()
        transformer.set_adapters([adapter.name], weights=[adapter.scale])
