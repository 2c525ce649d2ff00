"""Exports in the formats diffusers loads.

LoRA / DoRA: `pytorch_lora_weights.safetensors` with the adapter config (alpha, rank, DoRA,
targets) in its metadata, which the pipelines' `load_lora_weights` (where a family has one) and
`transformer.load_lora_adapter` read — without it a reload would assume alpha = rank. Full
fine-tunes: a diffusers `transformer/` folder. `worldtune export CKPT OUT [--fuse]` turns any
checkpoint into these, fusing an adapter into the base weights on request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from worldtune.atomic import atomic_write_json
from worldtune.errors import CheckpointError
from worldtune.train.adapters import unwrap

def save_adapter(out: str | Path, transformer: torch.nn.Module, spec, base_fingerprint: str,
                 state: dict[str, torch.Tensor] | None = None, action: dict | None = None) -> Path:
    """The trained adapter of `transformer` as its model family writes it, plus worldtune_adapter.json
    (the base model it belongs to, checked when it is loaded). `state`: the model's full state dict where
    the live parameters are shards (FSDP), gathered by the caller. `action`: an action run's facts (task,
    domain, normalisation, chunk, canvas); the domain's trained action rows (input projection, and output
    projection where the task predicts actions) are then written beside the adapter (`action_domain.safetensors`)
    and the facts into the JSON under "action"."""
    from worldtune.models.family import family_of
    from worldtune.train.adapters import adapter_metadata, peft_state_dict

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metadata = adapter_metadata(transformer)
    family = family_of(spec)
    path = family.save_adapter(out, peft_state_dict(transformer, state), metadata)
    if action is not None:
        family.dynamics().save_rows(out, transformer)
    atomic_write_json(out / "worldtune_adapter.json", {
        **family.adapter_info(), "base_fingerprint": base_fingerprint, "rank": metadata.get("r"),
        "alpha": metadata.get("lora_alpha"), "use_dora": metadata.get("use_dora"),
        **({"action": action} if action is not None else {})})
    return path


def save_consolidated(state: dict[str, torch.Tensor], cfg, out: Path,
                      set_aside: dict[str, torch.nn.Module] | None = None) -> Path:
    """A full state dict (e.g. gathered from FSDP shards) as a diffusers transformer folder; `set_aside`
    holds submodules training did without (the family's prepare_for_text) that the saved model needs."""
    from worldtune.models.build import build_transformer
    from worldtune.models.load import resolve_spec

    spec = resolve_spec(cfg.model.name, cfg.model.path, cfg.model.revision)
    model = build_transformer(spec, device="meta")
    for name, module in (set_aside or {}).items():
        state = {**state, **{f"{name}.{k}": v for k, v in module.state_dict().items()}}
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True, assign=True)
    model.save_pretrained(out, safe_serialization=True)
    return out


def export_run(out: Path, transformer: torch.nn.Module, cfg, spec, base_fingerprint: str, *,
               set_aside: dict[str, torch.nn.Module], ema: dict[str, torch.Tensor] | None,
               action: dict[str, Any] | None, mv, sharded: bool, dist) -> Path | None:
    """Diffusers files beside the run: LoRA weights with metadata, or a transformer folder.

    Under FSDP every process takes part in gathering the full state dict; rank 0 writes it.
    """
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(transformer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        result = out / "transformer" if cfg.train.mode == "full" else out
        if dist.main and cfg.train.mode == "full":
            save_consolidated(full, cfg, result, set_aside)
        elif dist.main:
            save_adapter(out, transformer, spec, base_fingerprint, state=full)
        dist.barrier()
        return result
    if not dist.main:
        return None
    out.mkdir(parents=True, exist_ok=True)
    if cfg.train.mode == "full":
        model = unwrap(transformer)
        for name, module in set_aside.items():
            setattr(model, name, module)
        if ema is not None:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(ema[n].to(p.dtype))
        model.save_pretrained(out / "transformer", safe_serialization=True)
        return out / "transformer"
    save_adapter(out, transformer, spec, base_fingerprint, action=action)
    if mv is not None:
        from worldtune.models.multiview import save_multiview_extras

        save_multiview_extras(out, mv)
    return out


def run(checkpoint: str, out: str, fuse: bool = False) -> Path:
    """`worldtune export`: a checkpoint (or a run folder's newest) into diffusers files."""
    from worldtune.config import WorldtuneConfig
    from worldtune.models.load import fingerprint, load_pipeline, load_transformer, resolve_spec
    from worldtune.models.family import family_of
    from worldtune.train.action_flow import predicts_actions
    from worldtune.train.adapters import apply_training_mode
    from worldtune.train.checkpoint import CheckpointManager

    source = _source(Path(checkpoint))
    ck = CheckpointManager.load(source)
    cfg = WorldtuneConfig.model_validate(ck["state"]["config"])
    if ck["sharded"] and cfg.train.mode == "full":
        return _export_sharded(source, cfg, Path(out))
    trainable = _sharded_adapter(source) if ck["sharded"] else ck.get("ema", ck["trainable"])
    spec = resolve_spec(cfg.model.name, cfg.model.path, cfg.model.revision)
    if fuse:
        pipe, _ = load_pipeline(cfg.model.name, cfg.model.path, seed=cfg.model.seed, revision=cfg.model.revision,
                                random_weights=cfg.model.random_weights)
        transformer = pipe.transformer
    else:
        transformer, _ = load_transformer(cfg.model.name, cfg.model.path, seed=cfg.model.seed,
                                          revision=cfg.model.revision, random_weights=cfg.model.random_weights)
    fp = fingerprint(transformer)
    if fp != ck["state"]["base_fingerprint"]:
        raise CheckpointError(f"{source}: the base model at model.path/name is not the one it was trained on")
    apply_training_mode(transformer, cfg.train.mode, cfg.train.lora, family_of(spec))
    action = ck["state"].get("action")  # an action run: its domain's rows are trained weights too
    if action is not None and cfg.train.mode != "full":  # a full run trains the whole tables
        family_of(spec).dynamics().train_rows(transformer, int(action["domain"]["id"]), None,
                                              outputs=predicts_actions(action.get("task")))
    named = dict(transformer.named_parameters())
    with torch.no_grad():
        for k, v in trainable.items():
            if k in named:
                named[k].copy_(v.to(named[k].dtype))
    out_path = Path(out)
    out_path.mkdir(parents=True, exist_ok=True)
    if cfg.train.mode == "full":
        transformer.save_pretrained(out_path / "transformer", safe_serialization=True)
        result = out_path / "transformer"
    elif fuse:
        merged = transformer.fuse_lora  # diffusers' PeftAdapterMixin fuses in place
        merged(lora_scale=1.0)
        transformer.unload_lora() if hasattr(transformer, "unload_lora") else None
        if action is not None:  # the rows into the table: a plain diffusers transformer, the facts beside it
            dyn = family_of(spec).dynamics()
            dyn.save_rows(out_path, transformer)
            dyn.merge_rows(transformer)
            atomic_write_json(out_path / "worldtune_adapter.json", {**family_of(spec).adapter_info(),
                                                                    "base_fingerprint": fp, "fused": True,
                                                                    "action": action})
        transformer.save_pretrained(out_path / "transformer", safe_serialization=True)
        result = out_path / "transformer"
    else:
        result = save_adapter(out_path, transformer, spec, fp, action=action)
    print(f"exported step {ck['state']['step']} of {source} to {result}")
    return result


def _source(path: Path) -> Path:
    """The checkpoint to export: `path` itself, or a run folder's newest complete one; what to pass when neither."""
    from worldtune.train.checkpoint import MARKER, CheckpointManager

    what = "pass a training run folder (train.out) or one of its checkpoints/step-N folders"
    if not path.is_dir():
        raise CheckpointError(f"{path} does not exist: {what}")
    if (path / "checkpoints").is_dir():
        newest = CheckpointManager(path).newest()
        if newest is None:
            raise CheckpointError(f"{path} holds no complete checkpoint yet (train.checkpoint.every, or let the run "
                                  "finish): nothing to export")
        return newest
    if not (path / MARKER).is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {MARKER} marker): {what}")
    return path


def _sharded_adapter(source: Path) -> dict[str, torch.Tensor]:
    """The adapter tensors of an FSDP checkpoint of a LoRA/DoRA run (the frozen base is not needed)."""
    from worldtune.train.dcp_reader import load_full

    return {k: v for k, v in load_full(source / "dcp")["model"].items() if "lora_" in k}


def _export_sharded(source: Path, cfg, out: Path) -> Path:
    """Consolidate an FSDP (torch.distributed.checkpoint) checkpoint into a diffusers transformer folder."""
    from worldtune.train.dcp_reader import load_full

    state = load_full(source / "dcp")["model"]
    result = save_consolidated(state, cfg, out / "transformer")
    print(f"consolidated sharded checkpoint {source} into {result}")
    return result
