"""Which parameters train: LoRA or DoRA adapters through peft, or the whole DiT.

Adapter parameters are kept in fp32 even when the frozen base is bf16 (as NVIDIA and the
diffusers example do): their updates are tiny relative to their values early in training.
"""

from __future__ import annotations

from typing import Any

import torch

from worldtune.errors import ConfigError

ADAPTER_NAME = "default"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module inside DDP / torch.compile wrappers (peft's state-dict helpers need it)."""
    while True:
        if hasattr(model, "module") and isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def lora_config(mode: str, lora, targets: tuple[str, ...]) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha if lora.alpha is not None else lora.rank, lora_dropout=lora.dropout,
        target_modules=list(targets), use_dora=(mode == "dora"),
        init_lora_weights="gaussian" if lora.init == "gaussian" else True,
    )


def apply_training_mode(transformer: torch.nn.Module, mode: str, lora, family=None) -> list[torch.nn.Parameter]:
    """Freeze what does not train, add adapters if asked, and return the trainable parameters.

    Adapters go on `lora.targets`, or where unset on the model family's targets; a full fine-tune
    trains what the family says (Cosmos 3: the generator pathway only)."""
    targets = tuple(lora.targets or (family.lora_targets if family is not None else ()))
    transformer.requires_grad_(False)
    if mode == "full":
        if family is not None:
            return family.full_finetune_parameters(transformer)
        transformer.requires_grad_(True)
        return [p for p in transformer.parameters()]
    transformer.add_adapter(lora_config(mode, lora, targets), adapter_name=ADAPTER_NAME)
    params = [p for n, p in transformer.named_parameters() if "lora_" in n]
    if not params:
        raise ConfigError(f"train.lora.targets {list(targets)} match no module of the transformer")
    for p in params:
        p.data = p.data.float()
        p.requires_grad_(True)
    return params


def trainable_state_dict(transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Named trainable tensors (exact resume needs every one, under its in-memory name)."""
    model = unwrap(transformer)
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def adapter_metadata(transformer: torch.nn.Module) -> dict[str, Any]:
    """The LoraConfig as diffusers stores it beside the weights, so a reload keeps alpha and DoRA."""
    cfg = unwrap(transformer).peft_config[ADAPTER_NAME]
    meta = cfg.to_dict()
    return {k: (sorted(v) if isinstance(v, set) else v) for k, v in meta.items()}


def peft_state_dict(transformer: torch.nn.Module, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The adapter in peft's saved naming; from `state` (a full state dict) where the model is sharded."""
    from peft.utils import get_peft_model_state_dict

    return get_peft_model_state_dict(unwrap(transformer), state_dict=state, adapter_name=ADAPTER_NAME)


def lora_settings(tc, family, lora: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Adapter settings as trained (`train` config `tc`'s, or a checkpoint's `lora`): alpha and targets resolved;
    None for full fine-tuning."""
    if tc.mode == "full":
        return None
    lora = lora if lora is not None else tc.lora.model_dump()
    return {**lora, "alpha": float(lora["alpha"] if lora.get("alpha") is not None else lora["rank"]),
            "targets": list(lora.get("targets") or family.lora_targets)}


def check_same_adapter(source, state: dict[str, Any], tc, family) -> None:
    """Adapter weights trained at one rank, alpha (scale) or set of targets cannot continue under others: a
    one-line error when checkpoint `source` (its saved `state`) was trained with other settings than `tc`."""
    from worldtune.errors import CheckpointError

    if tc.mode == "full":
        return
    old = ((state.get("config") or {}).get("train") or {}).get("lora")
    if old is None:
        return
    old, new = lora_settings(tc, family, old), lora_settings(tc, family)
    changed = [f"{k} {old.get(k)!r} -> {new[k]!r}" for k in ("rank", "alpha", "targets", "init")
               if old.get(k) != new[k]]
    if changed:
        raise CheckpointError(f"{source} was trained with other adapter settings ({'; '.join(changed)}): resume "
                              f"with the checkpoint's train.lora settings, or start a new train.out")
