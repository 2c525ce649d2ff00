from pathlib import Path

import pytest
import torch

from worldtune.config import load_config

FD = ("--train.task", "forward_dynamics")
FAILED_EPISODE = 1


def train_args(model_dir: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    """The options of a tiny test run; `worldtune train <these>` equals `Trainer(train_cfg(...))`."""
    return ["--model.path", str(model_dir), "--train.dataset", str(dataset), "--train.out", str(out),
            "--train.warmup", "2", "--train.lr", "1e-3", "--train.log_every", "1",
            "--train.tensorboard", "false", "--train.val_samples", "1", *extra]


def train_cfg(model_dir: Path, dataset: Path, out: Path, *extra: str):
    return load_config(None, train_args(model_dir, dataset, out, *extra))


@pytest.fixture(scope="session")
def fd_data(tmp_path_factory, tiny_cosmos3_dir) -> Path:
    """The demo robot (4-D actions, episode 1 a failed grasp) as 5-frame 32x64 grid clips with actions, with the
    action cache every action task (forward, inverse dynamics, joint) reads."""
    from worldtune.data.cache import run as cache_run
    from worldtune.data.prepare import run as prepare_run
    from worldtune.scene.writer import write_demo_dataset

    base = tmp_path_factory.mktemp("fd")
    src = write_demo_dataset(base / "lerobot", episodes=4, height=48, width=80, failed=(FAILED_EPISODE,), workers=1)
    cfg = load_config(None, ["--prepare.source", str(src), "--prepare.out", str(base / "ds"), "--prepare.height", "32",
                             "--prepare.width", "64", "--prepare.num_frames", "5", "--prepare.stride", "2",
                             "--prepare.workers", "1", "--prepare.val_fraction", "0.25", "--prepare.prompt_template",
                             "plain", "--prepare.actions.key", "action"])
    prepare_run(cfg.prepare, quiet=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny VAE on a 192x320 canvas: one thread is fastest on a shared 2-core box
    try:
        cache_run(load_config(None, ["--model.path", str(tiny_cosmos3_dir), "--cache.dataset", str(base / "ds"),
                                     "--cache.dtype", "fp32", *FD]))
    finally:
        torch.set_num_threads(threads)
    return base / "ds"
