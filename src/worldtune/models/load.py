"""Get a Cosmos model: from a local diffusers directory, or random-initialised from a spec.

A user with real weights points worldtune at a diffusers-format directory (or at a hub id whose
snapshot is already in the local Hugging Face cache) and everything loads offline through
`from_pretrained(local_files_only=True)`: worldtune never downloads weights. Without weights (every machine of this project), the same
classes are built from a registry spec; `init_model_dir` writes such a model as a complete
diffusers directory, so tests and the demo take exactly the path a real user takes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch

from worldtune.atomic import atomic_write_json
from worldtune.errors import ModelError
from worldtune.models.build import NoOpSafetyChecker, build_pipeline, build_transformer, pipeline_class, seeded
from worldtune.models.cpu_conv3d import route_conv3d_to_onednn
from worldtune.models.family import family_by_pipeline, family_of, supported_pipelines
from worldtune.models.registry import SPECS, ModelSpec, get_spec

SIDECAR = "worldtune_model.json"  # written by `model init`: which spec a directory was built from
DEFAULT_SPEC = "tiny-predict2.5"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_CONFIG_KEYS_IGNORED = ("_class_name", "_diffusers_version", "_name_or_path")


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  #: `org/name`, as the Hugging Face hub spells a model


def local_model_path(path: str | None, revision: str | None = None) -> str | None:
    """`model.path` as a folder on this machine: the folder itself, or the snapshot of a hub id
    (`org/name`, at `revision`) in the local Hugging Face cache. Nothing is downloaded."""
    if path is None or Path(path).expanduser().is_dir():
        return None if path is None else str(Path(path).expanduser())
    hub_like = HUB_ID.fullmatch(path) is not None
    if hub_like:
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(path, revision=revision, local_files_only=True)
        except Exception:  # not cached (LocalEntryNotFoundError), or not a valid repo id / revision
            pass
        from huggingface_hub.constants import HF_HUB_CACHE

        at, rev = (f" at revision {revision}", f" --revision {revision}") if revision else ("", "")
        raise ModelError(f"model.path={path}: no such directory, and no snapshot of the hub model {path}{at} in the "
                         f"local Hugging Face cache ({HF_HUB_CACHE}): point model.path at a local diffusers folder, "
                         f"or fetch it first (`hf download {path}{rev}`)")
    raise ModelError(f"model.path={path}: no such directory (point it at a local diffusers-format pipeline folder)")


def _check_random_allowed(spec: ModelSpec, random_weights: bool) -> None:
    if not spec.tiny and not random_weights:
        raise ModelError(f"model.name={spec.name} is a real-size model and model.path is not set: set model.path to "
                         f"its local diffusers folder (or model.random_weights = true for random weights)")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"{path}: cannot read ({e})") from None


def check_model_dir(path: str | Path) -> dict[str, Any]:
    """The directory's model_index.json, or a one-line error saying what a model directory needs."""
    root = Path(path)
    if not root.is_dir():
        raise ModelError(f"model directory {root} does not exist")
    index = root / "model_index.json"
    if not index.is_file():
        raise ModelError(
            f"{root} is not a diffusers pipeline directory (no model_index.json): point model.path at the "
            f"folder that holds model_index.json, transformer/, vae/, text_encoder/, tokenizer/, scheduler/"
        )
    meta = _read_json(index)
    cls = meta.get("_class_name")
    if family_by_pipeline(cls) is None:
        raise ModelError(f"{root} holds a {cls} pipeline; worldtune supports {', '.join(supported_pipelines())}")
    if not (root / "transformer" / "config.json").is_file():
        raise ModelError(f"{root}/transformer/config.json is missing: the directory is incomplete")
    return meta


def spec_from_dir(path: str | Path) -> ModelSpec:
    """A spec describing a model directory: its family's defaults with the transformer config on disk."""
    root = Path(path)
    meta = check_model_dir(root)
    family = family_by_pipeline(meta["_class_name"])
    sidecar = root / SIDECAR
    if sidecar.is_file():
        base = get_spec(_read_json(sidecar)["spec"])
    else:
        base = next(s for s in SPECS.values() if s.family == family and not s.tiny)
    tcfg = {k: v for k, v in _read_json(root / "transformer" / "config.json").items() if k not in _CONFIG_KEYS_IGNORED}
    return dataclasses.replace(base, name=str(root), transformer={**base.transformer, **tcfg})


def resolve_spec(name: str | None = None, path: str | None = None, revision: str | None = None) -> ModelSpec:
    """The spec for a (name, path) pair; a path is checked against an explicitly named spec."""
    path = local_model_path(path, revision)
    if path is None and name is not None and Path(name).is_dir():
        name, path = None, name
    if path is None:
        return get_spec(name or DEFAULT_SPEC)
    spec = spec_from_dir(path)
    if name is not None:
        want = get_spec(name)
        if want.family != spec.family:
            raise ModelError(
                f"{path} is a {spec.pipeline_class} (Cosmos {spec.family}) but model.name={name} expects a "
                f"{want.pipeline_class}: set model.name to a {spec.family} model or point model.path elsewhere"
            )
    return spec


def cast_as_pretrained(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`model.to(dtype)` as `from_pretrained(torch_dtype=dtype)` casts: the modules its class keeps in float32
    (`_keep_in_fp32_modules`, e.g. Cosmos 3's `time_embedder`) stay float32, so generation computes what a plain
    diffusers load of the same folder computes. (Training casts plainly: FSDP2 needs one dtype per shard group.)"""
    model.to(dtype=dtype)
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    if dtype != torch.float32 and keep:
        for name, module in model.named_modules():
            if any(k in name.split(".") for k in keep):
                module.to(dtype=torch.float32)
    return model


def load_pipeline(name: str | None = None, path: str | None = None, *, dtype: str = "fp32", device: str = "cpu",
                  seed: int = 0, vae_dtype: str = "fp32", revision: str | None = None, random_weights: bool = False,
                  keep_fp32_modules: bool = False):
    """The whole pipeline: from the directory if there is one, else random-initialised from the spec
    (a real-size spec only with `random_weights`). `keep_fp32_modules`: cast the transformer as
    `from_pretrained(torch_dtype=...)` does (see `cast_as_pretrained`), for generation."""
    path = local_model_path(path, revision)
    spec = resolve_spec(name, path)
    if path is None and not (name and Path(name).is_dir()):
        _check_random_allowed(spec, random_weights)
        pipe = build_pipeline(spec, seed=seed)
        if spec.weights:
            from worldtune.models.seeds import load_seed_weights

            load_seed_weights(pipe, spec.weights)
    else:
        root = path or name
        try:
            pipe = pipeline_class(spec).from_pretrained(root, safety_checker=NoOpSafetyChecker(), local_files_only=True)
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"{root}: cannot load the pipeline ({str(e).splitlines()[0]})") from None
    if keep_fp32_modules:
        cast_as_pretrained(pipe.transformer, DTYPES[dtype])
    else:
        pipe.transformer.to(dtype=DTYPES[dtype])
    if getattr(pipe, "text_encoder", None) is not None:  # Cosmos 3 embeds text tokens itself
        pipe.text_encoder.to(dtype=DTYPES[dtype])
    pipe.vae.to(dtype=DTYPES[vae_dtype])
    route_conv3d_to_onednn(pipe.vae)
    pipe.to(device)
    return pipe, spec


def seed_weights_in(name: str | None = None, path: str | None = None, revision: str | None = None) -> str | None:
    """The seed model whose shipped weights `load_pipeline(name, path)` loads: a seed spec named without a folder, or
    a folder `model init` wrote with a seed's trained weights (its sidecar says so); None for random weights and for
    weights from elsewhere, whose training only their maker can vouch for. Callers ask it what the checkpoint has
    learned (e.g. which action slots its recipe trained)."""
    path = local_model_path(path, revision)
    if path is None and name and Path(name).is_dir():
        name, path = None, name
    spec = resolve_spec(name, path)
    if not spec.weights:
        return None
    if path is None:
        return spec.weights
    sidecar = Path(path) / SIDECAR
    return spec.weights if sidecar.is_file() and _read_json(sidecar).get("weights") == "seed" else None


def load_transformer(name: str | None = None, path: str | None = None, *, dtype: str = "fp32",
                     device: str | torch.device = "cpu", seed: int = 0, revision: str | None = None,
                     random_weights: bool = False):
    """Only the transformer (training from caches never needs the VAE or the text encoder)."""
    path = local_model_path(path, revision)
    spec = resolve_spec(name, path)
    root = path or (name if name and Path(name).is_dir() else None)
    if root is None:
        _check_random_allowed(spec, random_weights)
        with seeded(seed):
            model = build_transformer(spec)
        if spec.weights:
            from worldtune.models.seeds import load_seed_transformer

            load_seed_transformer(model, spec.weights)
    else:
        try:
            model = family_of(spec).transformer_type().from_pretrained(root, subfolder="transformer",
                                                                        local_files_only=True)
        except (OSError, ValueError) as e:
            raise ModelError(f"{root}/transformer: cannot load ({str(e).splitlines()[0]})") from None
    return model.to(device=device, dtype=DTYPES[dtype]), spec


def init_model_dir(name: str, out: str | Path, seed: int = 0, random_weights: bool = False) -> Path:
    """`worldtune model init`: write a complete diffusers directory for a tiny spec: random-initialised, or a seed
    model's trained weights (`random_weights` gives a seed spec's random start, where its recipe begins)."""
    spec = get_spec(name)
    if not spec.tiny:
        raise ModelError(f"{name} is real-size ({spec.description}); `model init` writes tiny models only "
                         f"(real-size random models are built in memory on a GPU by the benchmarks)")
    out = Path(out)
    if (out / "model_index.json").exists():
        raise ModelError(f"{out} already holds a model: choose another directory or delete it")
    pipe = build_pipeline(spec, seed=seed)
    trained = bool(spec.weights) and not random_weights
    if trained:
        from worldtune.models.seeds import load_seed_weights

        load_seed_weights(pipe, spec.weights)
    pipe.save_pretrained(out, safe_serialization=True)
    atomic_write_json(out / SIDECAR, {"spec": name, "seed": seed, "weights": "seed" if trained else "random"})
    print(f"wrote {spec.name} ({spec.pipeline_class}, {'trained seed' if trained else 'random'} weights) to {out}")
    return out


def fingerprint(transformer: torch.nn.Module) -> str:
    """A short hash identifying base weights: config plus a sample of every tensor.

    Cheap even at 14B (a few values per tensor), yet two differently initialised or trained models
    never collide in practice. Adapter (LoRA/DoRA) parameters are excluded, so a base model keeps
    its fingerprint while it is being tuned.
    """
    h = hashlib.sha256()
    cfg = getattr(transformer, "config", {})
    h.update(json.dumps({k: v for k, v in dict(cfg).items() if not k.startswith("_")}, sort_keys=True,
                        default=str).encode())
    for key, tensor in sorted(transformer.state_dict().items()):
        if "lora_" in key or "base_layer" in key and "lora" in key:
            continue
        key = key.replace(".base_layer", "")
        sample = tensor.detach().flatten()[:16].to(device="cpu", dtype=torch.float32)
        h.update(key.encode())
        h.update(sample.numpy().tobytes())
    return h.hexdigest()[:16]


def _safetensors_sample(folder: Path, h, prefix: str | None = None) -> None:
    """Hash a few values of the first 8 tensors of each file (or of every tensor named `prefix*`)."""
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            keys = sorted(st.keys())
            for key in ([k for k in keys if k.startswith(prefix)] if prefix else keys[:8]):
                sl = st.get_slice(key)
                n = sl.get_shape()[0] if sl.get_shape() else 0
                t = sl[: min(n, 2)] if n else st.get_tensor(key)
                h.update(key.encode())
                h.update(t.float().flatten()[:16].numpy().tobytes())


def model_id(name: str | None = None, path: str | None = None, seed: int = 0, revision: str | None = None,
             text_projection: bool = False) -> str:
    """Identifies the VAE and text encoder of a model, for keying caches without loading it.

    For a directory: a hash of its configs and a sample of its weight files. For a random spec:
    the spec name and seed (the same spec and seed always build the same weights).
    `text_projection`: the cache holds text already passed through the transformer's
    `crossattn_proj`, so the transformer's projection weights are part of the identity too (a
    cache made with another transformer would otherwise be used silently).
    """
    path = local_model_path(path, revision)
    if path is None and not (name and Path(name).is_dir()):
        spec = resolve_spec(name)
        if spec.weights:
            from worldtune.models.seeds import weights_digest

            return f"{spec.name}:weights-{weights_digest(spec.weights)}"
        return f"{spec.name}:seed{seed}"
    root = Path(path or name)
    check_model_dir(root)
    h = hashlib.sha256()
    for sub in ("vae", *family_of(spec_from_dir(root)).text_components):
        # a model part is named by its config; a tokenizer (no config.json) by all its json files
        pattern = "config.json" if (root / sub / "config.json").is_file() else "*.json"
        for cfg in sorted((root / sub).glob(pattern)):
            h.update(cfg.read_bytes())
        _safetensors_sample(root / sub, h)
    if text_projection:
        h.update(b"crossattn_proj")
        _safetensors_sample(root / "transformer", h, prefix="crossattn_proj")
    return f"dir:{h.hexdigest()[:16]}"
