"""Fixtures for launcher tests: a tiny model folder and a cached fake dataset (as tests/train does)."""

from pathlib import Path

import pytest

from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config


@pytest.fixture(scope="session")
def launch_model_dir(tmp_path_factory) -> Path:
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-predict2.5", tmp_path_factory.mktemp("launch_models") / "tiny25")


@pytest.fixture(scope="session")
def launch_dataset(tmp_path_factory, launch_model_dir) -> Path:
    """A fake prepared dataset with cached latents and projected text (what LoRA training reads)."""
    from worldtune.data.cache import run as cache_run

    root = write_fake_dataset(tmp_path_factory.mktemp("launch_data") / "ds", n_train=4, n_val=1)
    cache_run(load_config(None, ["--model.path", str(launch_model_dir), "--cache.dataset", str(root),
                                 "--cache.text", "projected", "--cache.dtype", "fp32"]))
    return root
