"""Exports in the formats diffusers loads.

LoRA / DoRA: `pytorch_lora_weights.safetensors` with the adapter config (alpha, rank, DoRA,
targets) in its metadata, which `Cosmos2_5_PredictBasePipeline.load_lora_weights` and
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

LORA_FILE = "pytorch_lora_weights.safetensors"


def save_lora(out: str | Path, state_dict: dict[str, torch.Tensor], metadata: dict[str, Any], spec,
              base_fingerprint: str) -> Path:
    from diffusers import Cosmos2_5_PredictBasePipeline

    out = Path(out)
    Cosmos2_5_PredictBasePipeline.save_lora_weights(
        out, transformer_lora_layers={k: v.detach().float().cpu() for k, v in state_dict.items()},
        transformer_lora_adapter_metadata=metadata, safe_serialization=True)
    atomic_write_json(out / "worldtune_adapter.json", {
        "base_model": spec.name, "family": spec.family, "base_fingerprint": base_fingerprint,
        "hidden_size": spec.transformer["num_attention_heads"] * spec.transformer["attention_head_dim"],
        "num_layers": spec.transformer["num_layers"], "rank": metadata.get("r"),
        "alpha": metadata.get("lora_alpha"), "use_dora": metadata.get("use_dora")})
    return out / LORA_FILE


def run(checkpoint: str, out: str, fuse: bool = False) -> Path:
    """`worldtune export`: a checkpoint (or a run folder's newest) into diffusers files."""
    from worldtune.config import WorldtuneConfig
    from worldtune.models.load import fingerprint, load_pipeline, load_transformer, resolve_spec
    from worldtune.train.adapters import adapter_metadata, apply_training_mode, peft_state_dict
    from worldtune.train.checkpoint import CheckpointManager

    source = CheckpointManager(checkpoint).resolve(checkpoint)
    ck = CheckpointManager.load(source)
    cfg = WorldtuneConfig.model_validate(ck["state"]["config"])
    if ck["sharded"]:
        return _export_sharded(source, cfg, Path(out))
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
    apply_training_mode(transformer, cfg.train.mode, cfg.train.lora)
    named = dict(transformer.named_parameters())
    with torch.no_grad():
        for k, v in ck.get("ema", ck["trainable"]).items():
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
        transformer.save_pretrained(out_path / "transformer", safe_serialization=True)
        result = out_path / "transformer"
    else:
        result = save_lora(out_path, peft_state_dict(transformer), adapter_metadata(transformer), spec, fp)
    print(f"exported step {ck['state']['step']} of {source} to {result}")
    return result


def _export_sharded(source: Path, cfg, out: Path) -> Path:
    """Consolidate an FSDP (torch.distributed.checkpoint) checkpoint into a diffusers transformer folder."""
    from worldtune.train.dcp_reader import load_full
    from worldtune.train.trainer import save_consolidated

    state = load_full(source / "dcp")["model"]
    result = save_consolidated(state, cfg, out / "transformer")
    print(f"consolidated sharded checkpoint {source} into {result}")
    return result
