"""Seed models: shipped trained weights of the registry's classes, within the size budget, that have learned."""

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from worldtune.errors import ModelError
from worldtune.models.registry import SPECS
from worldtune.models.seeds import MANIFEST, read_manifest, seed_folder
from worldtune.scene.episode import SCENE_VERSION, SyntheticEpisode

REPO = Path(__file__).resolve().parents[2]
SEEDS = [s.name for s in SPECS.values() if s.weights and (seed_folder(s.weights) / MANIFEST).is_file()]


def test_the_demo_default_seed_ships_and_an_unshipped_one_says_how_to_make_it():
    """Seed specs whose weights are not made yet stay listed (their recipe runs), but load with a one-line error."""
    assert "seed-predict2.5" in SEEDS
    for name in (s.name for s in SPECS.values() if s.weights and s.name not in SEEDS):
        with pytest.raises(ModelError, match=f"worldtune seed {name} --out DIR"):
            read_manifest(name)


def test_shipped_seed_weights_stay_within_40_mib_in_git():
    files = subprocess.run(["git", "ls-files", "src/worldtune/seeds"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    assert any(f.endswith(".safetensors") for f in files), files
    assert sum((REPO / f).stat().st_size for f in files) <= 40 * 2**20


@pytest.mark.parametrize("name", SEEDS)
def test_manifest_records_how_the_weights_were_made(name):
    m = read_manifest(name)
    assert m["scene_version"] == SCENE_VERSION  # a new scene needs new seed weights
    assert m["autoencoder"]["steps"] > 0 and m["transformer"]["steps"] > 0
    assert len(m["vae_config"]["latents_mean"]) == len(m["vae_config"]["latents_std"])


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return 10 * math.log10(4.0 / float((a.clamp(-1, 1) - b).pow(2).mean()))


@pytest.mark.parametrize("name", SEEDS)
def test_seed_vae_reconstructs_the_scene_and_a_random_one_does_not(name, tmp_path):
    """The held-out tasks' episodes (never trained on) through the shipped VAE vs the same class at random init."""
    import cv2

    from worldtune.models.load import init_model_dir, load_pipeline
    from worldtune.seed import recipe_for

    spec, r = SPECS[name], recipe_for(name)
    ep = SyntheticEpisode(5, 20, seed=0, height=r.camera_height, width=r.camera_width, targets=r.held_out)
    h, w = spec.height // 2, spec.width // 2
    frames = []
    for i in range(5):
        views = ep.render(i)
        cells = [cv2.resize(views[n], (w, h), interpolation=cv2.INTER_AREA)
                 for n in ("exterior_1_left", "exterior_2_left", "wrist_left")]
        top, bottom = np.concatenate(cells[:2], 1), np.concatenate([cells[2], np.zeros_like(cells[0])], 1)
        frames.append(np.concatenate([top, bottom], 0))
    x = torch.from_numpy(np.stack(frames)).permute(3, 0, 1, 2)[None].float() / 127.5 - 1
    psnr = {}
    for trained in (True, False):
        folder = init_model_dir(name, tmp_path / str(trained), random_weights=not trained)
        pipe, _ = load_pipeline(path=str(folder))
        with torch.no_grad():
            psnr[trained] = _psnr(pipe.vae.decode(pipe.vae.encode(x).latent_dist.mode()).sample, x)
    assert psnr[True] > 24.0 and psnr[False] < 15.0, psnr


def test_a_missing_seed_folder_is_a_one_line_error(monkeypatch, tmp_path):
    from worldtune.errors import ModelError
    from worldtune.models import seeds

    monkeypatch.setattr(seeds, "SEEDS_DIR", tmp_path)
    with pytest.raises(ModelError, match="worldtune seed"):
        seeds.read_manifest("seed-predict2.5")
