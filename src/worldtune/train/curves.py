"""The loss curve of a run folder as `loss.png`, drawn from its metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path


def loss_plot(run: Path) -> Path | None:
    """Training loss and held-out loss (fixed noise) against the optimizer step; None without rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = run / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    if not train:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*train), label="train loss")
    if val:
        ax.plot(*zip(*val), "o-", label="held-out loss (fixed noise)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("rectified-flow MSE")
    ax.legend()
    fig.tight_layout()
    path = run / "loss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
