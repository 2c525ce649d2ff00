import json

import numpy as np
import pytest
import torch

from worldtune.errors import ModelError
from worldtune.models.family import family_of
from worldtune.models.load import (
    fingerprint, init_model_dir, load_pipeline, load_transformer, model_id, resolve_spec)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model_dir("tiny-predict2.5", tmp_path_factory.mktemp("m") / "tiny25", seed=3)


def _generate(pipe, seed=0):
    return pipe(prompt="a robot arm picks up a red cube", height=64, width=112, num_frames=9, num_inference_steps=2,
                guidance_scale=3.0, output_type="np", generator=torch.Generator().manual_seed(seed),
                max_sequence_length=256).frames


def test_model_dir_round_trip_gives_identical_outputs(model_dir):
    built, _ = load_pipeline("tiny-predict2.5", seed=3)
    loaded, spec = load_pipeline(path=str(model_dir))
    assert spec.family == "predict2.5" and spec.height == 64
    assert fingerprint(built.transformer) == fingerprint(loaded.transformer)
    a, b = _generate(built), _generate(loaded)
    assert a.shape == (1, 9, 64, 112, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, _generate(loaded, seed=1))


def test_model_dir_is_complete_and_self_describing(model_dir):
    index = json.loads((model_dir / "model_index.json").read_text())
    assert index["_class_name"] == "Cosmos2_5_PredictBasePipeline"
    for sub in ("transformer", "vae", "text_encoder", "tokenizer", "scheduler"):
        assert (model_dir / sub).is_dir(), sub
    assert json.loads((model_dir / "worldtune_model.json").read_text())["spec"] == "tiny-predict2.5"


def test_predict2_tiny_dir_loads(tmp_path):
    d = init_model_dir("tiny-predict2", tmp_path / "p2")
    pipe, spec = load_pipeline(path=str(d))
    assert type(pipe).__name__ == "Cosmos2VideoToWorldPipeline" and family_of(spec).uses_fps
    out = pipe(prompt="a robot", height=64, width=112, num_frames=9, num_inference_steps=2, guidance_scale=3.0,
               output_type="np", generator=torch.Generator().manual_seed(0), max_sequence_length=128, fps=16,
               image=np.zeros((64, 112, 3), np.uint8)).frames
    assert out.shape[1:] == (9, 64, 112, 3)


def test_transformer_only_load_matches_pipeline(model_dir):
    t, _ = load_transformer(path=str(model_dir))
    p, _ = load_pipeline(path=str(model_dir))
    assert fingerprint(t) == fingerprint(p.transformer)
    assert model_id(path=str(model_dir)).startswith("dir:")
    assert model_id("tiny-predict2.5", seed=3) != model_id("tiny-predict2.5", seed=4)


def test_one_line_errors(model_dir, tmp_path):
    with pytest.raises(ModelError, match="unknown model 'cosmos-9000'"):
        resolve_spec("cosmos-9000")
    with pytest.raises(ModelError, match="not a diffusers pipeline directory"):
        resolve_spec(path=str(tmp_path))
    with pytest.raises(ModelError, match="expects a Cosmos2VideoToWorldPipeline"):
        resolve_spec("tiny-predict2", str(model_dir))
    other = tmp_path / "sd"
    other.mkdir()
    (other / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(ModelError, match="holds a StableDiffusionPipeline"):
        resolve_spec(path=str(other))
    with pytest.raises(ModelError, match="already holds a model"):
        init_model_dir("tiny-predict2.5", model_dir)
    with pytest.raises(ModelError, match="real-size"):
        init_model_dir("cosmos-predict2.5-2b", tmp_path / "big")


def test_hub_id_resolves_from_the_local_cache_only(tmp_path, monkeypatch):
    """model.path may name a hub model already in the HF cache (at a revision); nothing is downloaded."""
    import shutil

    from huggingface_hub import constants

    from worldtune.models.load import local_model_path

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--acme--tiny-cosmos"
    commit = "a" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "refs" / "v1").write_text(commit)
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir := init_model_dir("tiny-predict2.5", tmp_path / "m"), snapshot)
    assert local_model_path("acme/tiny-cosmos") == str(snapshot)
    assert local_model_path("acme/tiny-cosmos", "v1") == str(snapshot)
    t, spec = load_transformer(path="acme/tiny-cosmos")
    assert spec.family == "predict2.5" and fingerprint(t) == fingerprint(load_transformer(path=str(model_dir))[0])
    with pytest.raises(ModelError, match=r"acme/tiny-cosmos at revision v2 in the local Hugging Face cache .*hf "
                                         r"download acme/tiny-cosmos --revision v2"):
        resolve_spec(path="acme/tiny-cosmos", revision="v2")
    with pytest.raises(ModelError, match="model.path=acme/elsewhere: no such directory, and no snapshot"):
        load_pipeline(path="acme/elsewhere")
    with pytest.raises(ModelError, match="model.path=/no/such/dir: no such directory"):
        load_pipeline(path="/no/such/dir")


def test_real_size_name_without_path_needs_random_weights():
    with pytest.raises(ModelError, match="cosmos-predict2.5-2b is a real-size model and model.path is not set"):
        load_transformer("cosmos-predict2.5-2b")
    with pytest.raises(ModelError, match="model.random_weights = true"):
        load_pipeline("cosmos-predict2-14b")
