import shutil
from pathlib import Path

import pytest

from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-predict2.5", tmp_path_factory.mktemp("models") / "tiny25")


@pytest.fixture(scope="session")
def cached_dataset(tmp_path_factory, tiny_model_dir) -> Path:
    """A fake prepared dataset with latents and projected + raw text caches for the tiny model dir."""
    from worldtune.data.cache import run as cache_run

    root = write_fake_dataset(tmp_path_factory.mktemp("data") / "ds", n_train=4, n_val=1)
    for kind in ("projected", "raw"):
        cache_run(load_config(None, ["--model.path", str(tiny_model_dir), "--cache.dataset", str(root),
                                     "--cache.text", kind, "--cache.dtype", "fp32"]))
    return root


def train_cfg(model_dir: Path, dataset: Path, out: Path, *extra: str):
    return load_config(None, ["--model.path", str(model_dir), "--train.dataset", str(dataset), "--train.out", str(out),
                              "--train.warmup", "2", "--train.lr", "1e-3", "--train.log_every", "1",
                              "--train.tensorboard", "false", "--train.val_samples", "1", *extra])


@pytest.fixture
def fresh(tmp_path):
    def _copy(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        return dst
    return _copy
