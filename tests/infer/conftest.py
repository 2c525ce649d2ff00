"""Shared fixtures for the generation tests: a tiny model on disk, adapters, and small input sets.

Everything is small enough for 2 CPU cores: 32x48 pixels, 5 frames (2 latent frames), 2-3 steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

H, W, F = 32, 48, 5
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]


@pytest.fixture(scope="session")
def tiny_pipe(tiny_model_dir):
    """The tiny pipeline in fp32 on the CPU (read-only use: tests must not load adapters into it)."""
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_model_dir), dtype="fp32")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def make_adapter(transformer: torch.nn.Module, out: Path, rank: int = 4, alpha: float = 8.0, seed: int = 0) -> Path:
    """An adapter as the training stage exports it, with random B matrices so that it changes the output."""
    import copy

    from diffusers import Cosmos2_5_PredictBasePipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    model = copy.deepcopy(transformer)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=LORA_TARGETS, init_lora_weights=True)
    model.add_adapter(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    Cosmos2_5_PredictBasePipeline.save_lora_weights(
        out, transformer_lora_layers=get_peft_model_state_dict(model),
        transformer_lora_adapter_metadata=cfg.to_dict(), safe_serialization=True)
    return out


@pytest.fixture(scope="session")
def adapter_dir(tiny_pipe, tmp_path_factory) -> Path:
    return make_adapter(tiny_pipe.transformer, tmp_path_factory.mktemp("adapters") / "lora_a")


def random_frames(n: int, h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    """Smooth random frames (pure noise compresses badly and tells a codec test nothing)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (n, h // 8 + 1, w // 8 + 1, 3)).astype(np.uint8)
    import cv2

    return np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_LINEAR) for f in base])


def write_image(path: Path, frame: np.ndarray) -> Path:
    from PIL import Image

    Image.fromarray(frame).save(path)
    return path


GRID = {"type": "grid", "rows": 2, "cols": 2, "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]}}


def make_dataset(root: Path, clips: dict[str, str], num_frames: int = 9, h: int = H, w: int = W) -> Path:
    """A prepared dataset as `worldtune prepare` writes it: info.json, manifest.parquet, clips/*.mp4."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from worldtune.data.video import write_video

    rows = []
    for i, (clip_id, split) in enumerate(clips.items()):
        rel = f"clips/{clip_id}.mp4"
        write_video(root / rel, random_frames(num_frames, h, w, seed=i), fps=16)
        rows.append({"clip_id": clip_id, "video": rel, "prompt": f"A robot does task {i}.", "task": f"task {i}",
                     "split": split, "num_frames": num_frames})
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    info = {"format": "worldtune.dataset", "version": 1, "layout": GRID, "height": h, "width": w,
            "num_frames": num_frames, "fps": 16}
    (root / "info.json").write_text(json.dumps(info))
    return root
