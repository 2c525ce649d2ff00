from pathlib import Path

from worldtune.config import load_config


def train_cfg(model_dir: Path, dataset: Path, out: Path, *extra: str):
    return load_config(None, ["--model.path", str(model_dir), "--train.dataset", str(dataset), "--train.out", str(out),
                              "--train.warmup", "2", "--train.lr", "1e-3", "--train.log_every", "1",
                              "--train.tensorboard", "false", "--train.val_samples", "1", *extra])
