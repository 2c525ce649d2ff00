"""`worldtune seed` end to end with a small recipe: it stops where asked and resumes, trains Cosmos 3 with actions,
and packs weights that load back into the registry's classes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from worldtune.errors import ConfigError
from worldtune.seed import recipe_for, run

SMALL = ["--prepare.workers", "1", "--autoencoder.val_every", "2", "--autoencoder.batch_size", "1",
         "--autoencoder.frames", "5", "--train.val_every", "0", "--train.val_samples", "1", "--cache.dtype", "fp32"]


@pytest.mark.slow
@pytest.mark.usefixtures("domain_tables")
def test_seed_cosmos3_recipe_stops_resumes_and_packs_loadable_weights(tmp_path, monkeypatch):
    import worldtune.models.seeds as seeds
    from worldtune.models.load import init_model_dir
    from safetensors.torch import load_file

    recipe = dataclasses.replace(recipe_for("seed-cosmos3"), episodes=4, camera_height=96, camera_width=160,
                                 vae_steps=2, steps=3, batch=1, warmup=1)
    with pytest.raises(ConfigError, match="--stop-after"):
        run("seed-cosmos3", str(tmp_path / "w"), SMALL, recipe=recipe, stop_after="transformer")
    first = run("seed-cosmos3", str(tmp_path / "w"), SMALL, recipe=recipe, stop_after="autoencoder")
    assert first["seed"] is None and set(first["seconds"]) == {"data", "prepare", "autoencoder"}
    assert not (tmp_path / "w" / "model").exists()
    ship = tmp_path / "seeds" / "seed-cosmos3"
    done = run("seed-cosmos3", str(tmp_path / "w"), SMALL, recipe=recipe, ship=str(ship))
    assert done["seconds"]["autoencoder"] < 5  # resumed: the finished autoencoder is not trained again
    manifest = json.loads((ship / "seed.json").read_text())
    assert manifest["transformer"]["steps"] == 3 and manifest["recipe"]["actions"]
    run_cfg = json.loads((tmp_path / "w" / "runs" / "transformer" / "run.json").read_text())
    assert (run_cfg["task"], run_cfg["mode"]) == ("joint", "full")

    from diffusers import Cosmos3OmniTransformer

    # the recipe's next architecture (a latent patch of 1) is what trained and what was packed
    trained = Cosmos3OmniTransformer.from_pretrained(tmp_path / "w" / "runs" / "transformer" / "export" / "transformer")
    assert trained.config.latent_patch_size == 1 and manifest["recipe"]["transformer"] == {"latent_patch_size": 1}
    packed = load_file(str(ship / "transformer.safetensors"))
    assert all(torch.equal(p.half(), packed[n]) for n, p in trained.named_parameters())
    assert (tmp_path / "w" / "vae_start" / "model_index.json").is_file()  # the VAE fine-tuned from the shipped one

    # weights packed under the spec's own architecture load through the registry
    ship2 = tmp_path / "seeds2" / "seed-cosmos3"
    same = dataclasses.replace(recipe, transformer={})
    run("seed-cosmos3", str(tmp_path / "w2"), SMALL, recipe=same, ship=str(ship2))
    monkeypatch.setattr(seeds, "SEEDS_DIR", tmp_path / "seeds2")
    folder = init_model_dir("seed-cosmos3", tmp_path / "model")
    loaded = Cosmos3OmniTransformer.from_pretrained(folder / "transformer")
    packed = load_file(str(ship2 / "transformer.safetensors"))
    assert all(torch.equal(p.half(), packed[n]) for n, p in loaded.named_parameters())


def test_a_resumed_transformer_run_keeps_the_length_its_probe_fitted(tmp_path):
    """`--budget-s` fits a fresh run's steps once; a later call resumes with that length (its schedule's), not
    the recipe's default, and a run with no checkpoint yet starts afresh."""
    from worldtune.seed import _started_steps

    run_dir = tmp_path / "transformer"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "preempted", "steps": 1538}))
    assert _started_steps(run_dir) is None
    (run_dir / "checkpoints" / "step-00000250").mkdir(parents=True)
    assert _started_steps(run_dir) == 1538


@pytest.mark.slow
@pytest.mark.usefixtures("domain_tables")
def test_continue_starts_from_the_shipped_seed_and_adds_its_run_to_the_manifest(tmp_path):
    """`--continue`: the transformer starts from the shipped weights (no autoencoder step), trains, and the packed
    seed.json keeps what made the seed and gains this run, once, however often the command is run."""
    from safetensors.torch import load_file

    from worldtune.models.seeds import read_manifest, seed_folder

    recipe = dataclasses.replace(recipe_for("seed-cosmos3"), episodes=2, camera_height=96, camera_width=160,
                                 steps=2, batch=1, warmup=1)
    shipped = load_file(str(seed_folder("seed-cosmos3") / "transformer.safetensors"))
    before = read_manifest("seed-cosmos3")
    work, ship = tmp_path / "w", tmp_path / "ship"
    first = run("seed-cosmos3", str(work), SMALL, recipe=recipe, stop_after="model", continue_shipped=True,
                data_seed=5)
    assert "autoencoder" in first["seconds"] and not (work / "runs" / "vae").exists()
    (start,) = (work / "model" / "transformer").glob("*.safetensors")
    assert all(torch.equal(v.half(), shipped[k]) for k, v in load_file(str(start)).items() if k in shipped)

    for _ in range(2):  # the second call finds the run done and packs it again
        run("seed-cosmos3", str(work), SMALL, recipe=recipe, ship=str(ship), continue_shipped=True,
            data_seed=5, command="worldtune seed seed-cosmos3 --continue")
    after = json.loads((ship / "seed.json").read_text())
    runs_before = before["transformer"].get("runs") or [before["transformer"]]
    assert len(after["transformer"]["runs"]) == len(runs_before) + 1
    new = after["transformer"]["runs"][-1]
    assert new["steps"] == 2 and new["batch"] == 1 and "data seed 5" in new["data"] and new["mode_weights"]
    assert after["transformer"]["steps"] == sum(r["steps"] for r in runs_before) + 2
    assert after["autoencoder"] == before["autoencoder"] and after["command"].endswith("then worldtune seed "
                                                                                      "seed-cosmos3 --continue")
    trained = load_file(str(ship / "transformer.safetensors"))
    assert any(not torch.equal(trained[k], v) for k, v in shipped.items())
