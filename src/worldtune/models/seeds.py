"""Seed models: the weights worldtune trained from scratch and ships, loaded into the registry's classes.

Why: no weights can be downloaded where worldtune is developed and tested, and random weights show nothing
(their videos decode to flat grey). A seed model is a registry spec (the real diffusers classes at a small
size) plus trained weights in `worldtune/seeds/<name>/`: one fp16 safetensors file per component and
`seed.json`, which records how they were made (the `worldtune seed` recipe, the scene generator's version,
steps, device time, curves) and the VAE's measured latent statistics. It knows a synthetic tabletop scene,
not the robot world: real work starts from real Cosmos weights in a local folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from worldtune.errors import ModelError

SEEDS_DIR = Path(__file__).resolve().parent.parent / "seeds"
COMPONENTS = ("transformer", "vae")  # diffusers modules: one fp16 safetensors file each
# The text encoder is a transformers model, whose tensor names change between transformers versions: it ships as
# its own folder and loads through from_pretrained, which converts older names.
TEXT_ENCODER = "text_encoder"
MANIFEST = "seed.json"


def seed_folder(name: str) -> Path:
    """The folder of a seed model's shipped weights (it may not exist yet)."""
    return SEEDS_DIR / name


def read_manifest(name: str) -> dict[str, Any]:
    """`seed.json` of a shipped seed model, or a one-line error saying how to make it."""
    path = seed_folder(name) / MANIFEST
    if not path.is_file():
        raise ModelError(f"the seed model {name} has no weights in {path.parent}: make them with "
                         f"`worldtune seed {name} --out DIR` (docs/models.md), or use a tiny-* model")
    return json.loads(path.read_text())


def load_seed_weights(pipe, name: str) -> None:
    """Load a seed model's shipped weights into a pipeline built from its spec (every component must fit)."""
    from safetensors.torch import load_file

    manifest = read_manifest(name)
    for comp in COMPONENTS:
        module = getattr(pipe, comp, None)
        path = seed_folder(name) / f"{comp}.safetensors"
        if module is None:
            continue
        if not path.is_file():
            raise ModelError(f"{path} is missing: the seed model {name} is incomplete (reinstall worldtune)")
        state = load_file(str(path))
        dtype = next(module.parameters()).dtype
        missing, unexpected = module.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
        if missing or unexpected:
            raise ModelError(f"{path} does not fit {type(module).__name__} ({len(missing)} missing, "
                             f"{len(unexpected)} unexpected tensors): the seed weights and the registry spec differ")
    te_folder = seed_folder(name) / TEXT_ENCODER
    if getattr(pipe, TEXT_ENCODER, None) is not None:
        if not te_folder.is_dir():
            raise ModelError(f"{te_folder} is missing: the seed model {name} is incomplete (reinstall worldtune)")
        te = type(pipe.text_encoder).from_pretrained(te_folder, torch_dtype=next(pipe.text_encoder.parameters()).dtype,
                                                    local_files_only=True)
        pipe.register_modules(text_encoder=te.eval())
    vae_config = manifest.get("vae_config") or {}
    if vae_config:
        pipe.vae.register_to_config(**vae_config)
        if hasattr(pipe, "latents_mean"):  # Cosmos 2.5 pipelines read the statistics once, at construction
            z = pipe.vae.config.z_dim
            pipe.latents_mean = torch.tensor(vae_config["latents_mean"]).view(1, z, 1, 1, 1).float()
            pipe.latents_std = 1.0 / torch.tensor(vae_config["latents_std"]).view(1, z, 1, 1, 1).float()


def load_seed_transformer(transformer: torch.nn.Module, name: str) -> None:
    """Only the transformer's weights (training from caches needs nothing else)."""
    from safetensors.torch import load_file

    read_manifest(name)
    state = load_file(str(seed_folder(name) / "transformer.safetensors"))
    dtype = next(transformer.parameters()).dtype
    transformer.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)


def weights_digest(name: str) -> str:
    """A short hash of a seed model's shipped files (keys caches made with it)."""
    h = hashlib.sha256()
    for f in sorted(p for p in seed_folder(name).rglob("*") if p.is_file()):
        h.update(f.name.encode())
        h.update(f.read_bytes() if f.suffix == ".json" else str(f.stat().st_size).encode())
    return h.hexdigest()[:12]


def pack_seed(model_dir: Path, name: str, provenance: dict[str, Any], out: Path | None = None) -> Path:
    """Write a trained model folder's weights as a seed model's shipped files (fp16, one file per component)."""
    from diffusers import AutoencoderKLWan
    from safetensors.torch import load_file, save_file

    from worldtune.atomic import atomic_write_json

    out = Path(out) if out is not None else seed_folder(name)
    out.mkdir(parents=True, exist_ok=True)
    for comp in COMPONENTS:
        files = sorted((model_dir / comp).glob("*.safetensors"))
        if not files:
            continue
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        tmp = out / f".tmp-{comp}.safetensors"
        save_file({k: v.to(torch.float16).contiguous() for k, v in state.items()}, str(tmp))
        tmp.replace(out / f"{comp}.safetensors")
    te_dir = model_dir / TEXT_ENCODER
    if te_dir.is_dir():
        from transformers import AutoConfig
        import transformers

        arch = AutoConfig.from_pretrained(te_dir).architectures[0]
        te = getattr(transformers, arch).from_pretrained(te_dir, torch_dtype=torch.float16, local_files_only=True)
        tmp = out / f".tmp-{TEXT_ENCODER}"
        shutil.rmtree(tmp, ignore_errors=True)
        te.save_pretrained(tmp)
        shutil.rmtree(out / TEXT_ENCODER, ignore_errors=True)
        tmp.rename(out / TEXT_ENCODER)
    vae_cfg = AutoencoderKLWan.load_config(str(model_dir / "vae"))
    manifest = {**provenance, "vae_config": {"latents_mean": vae_cfg["latents_mean"],
                                             "latents_std": vae_cfg["latents_std"]}}
    atomic_write_json(out / MANIFEST, manifest)
    return out
