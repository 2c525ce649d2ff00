"""What validation videos are decoded and sampled with, when the run itself holds no pipeline."""

from __future__ import annotations

from pathlib import Path

import torch

from worldtune.config import WorldtuneConfig
from worldtune.models.cpu_conv3d import route_conv3d_to_onednn


def validation_components(cfg: WorldtuneConfig, spec, pipe, device: torch.device):
    """The VAE and scheduler for validation videos: the pipeline's (decoded clips), else the model folder's, else
    a random pipeline's (a registry model without weights); never the text encoder."""
    if pipe is not None:
        return pipe.vae, pipe.scheduler
    from worldtune.models.load import load_pipeline, local_model_path

    root = local_model_path(cfg.model.path, cfg.model.revision) or (
        cfg.model.name if cfg.model.name and Path(cfg.model.name).is_dir() else None)
    if root is not None:
        from diffusers import AutoencoderKLWan

        from worldtune.models.build import build_scheduler

        # loaded here, not through load_pipeline (which routes its VAE itself): oneDNN on the CPU, as there
        vae = route_conv3d_to_onednn(AutoencoderKLWan.from_pretrained(root, subfolder="vae", local_files_only=True))
        sched_cls = type(build_scheduler(spec))
        sched = sched_cls.from_pretrained(root, subfolder="scheduler", local_files_only=True)
    else:
        pipe, _ = load_pipeline(cfg.model.name, None, seed=cfg.model.seed, random_weights=cfg.model.random_weights)
        vae, sched = pipe.vae, pipe.scheduler
    return vae.to(device), sched
