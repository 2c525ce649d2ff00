"""Fixtures shared across test folders: one tiny model directory and one cached dataset per session.

Building the tiny model (and caching latents with it) costs seconds; sharing them keeps CI short.
"""

from pathlib import Path

import pytest
import torch

from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny-predict2.5 pipeline written as a diffusers directory, loaded the way a user's weights are."""
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-predict2.5", tmp_path_factory.mktemp("models") / "tiny-predict2.5")


@pytest.fixture(scope="session")
def tiny_cosmos3_dir(tmp_path_factory) -> Path:
    """A tiny-cosmos3 pipeline written as a diffusers directory (shared by the Cosmos 3 tests)."""
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-cosmos3", tmp_path_factory.mktemp("models") / "tiny-cosmos3")


@pytest.fixture(scope="session")
def cached_dataset(tmp_path_factory, tiny_model_dir) -> Path:
    """A fake prepared dataset with latents and projected + raw text caches for the tiny model dir."""
    from worldtune.data.cache import run as cache_run

    root = write_fake_dataset(tmp_path_factory.mktemp("data") / "ds", n_train=4, n_val=1)
    for kind in ("projected", "raw"):
        cache_run(load_config(None, ["--model.path", str(tiny_model_dir), "--cache.dataset", str(root),
                                     "--cache.text", kind, "--cache.dtype", "fp32"]))
    return root


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matmuls run fastest on one thread; on a shared 2-core box more threads only contend."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
