"""Experiment trackers of a run: TensorBoard and Weights & Biases, behind one small interface.

Both get the resolved config at the start, every logged row of scalars, and the validation
videos. W&B is the official client library (an optional extra: `pip install 'worldtune[wandb]'`);
its run id is kept in the run folder, so a resumed or requeued run continues the same W&B run.
`WANDB_MODE=offline` writes it under `<run>/wandb/` for a later `wandb sync`.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from worldtune.errors import ConfigError

WANDB_ID_FILE = "wandb_id"


def check_wandb() -> None:
    """Fail before training starts, not at the first log, when W&B is asked for but not installed."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError("train.wandb = true needs the wandb package: pip install 'worldtune[wandb]' "
                          "(or set train.wandb = false)") from None


class Trackers:
    """TensorBoard and/or W&B for one run folder (main process only)."""

    def __init__(self, out: Path, config: dict[str, Any], config_toml: str, *, tensorboard: bool, wandb: bool,
                 project: str) -> None:
        self.tb = None
        self.wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                SummaryWriter = None
            if SummaryWriter is not None:
                self.tb = SummaryWriter(str(out / "tensorboard"))
                self.tb.add_text("config", "```toml\n" + config_toml + "```", 0)
        if wandb:
            check_wandb()
            import wandb as wb

            id_file = out / WANDB_ID_FILE
            run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
            id_file.write_text(run_id)
            self.wandb = wb.init(project=project, name=out.name, id=run_id, resume="allow", dir=str(out),
                                 config=config)

    def log(self, row: dict[str, Any]) -> None:
        scalars = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k.replace("@", "/"), v, row["step"])
        if self.wandb is not None:
            self.wandb.log({k.replace("@", "/"): v for k, v in scalars.items()}, step=row["step"])

    def videos(self, step: int, paths: list[Path]) -> None:
        if self.wandb is not None and paths:
            import wandb as wb

            self.wandb.log({f"val_video/{p.stem}": wb.Video(str(p), format="mp4") for p in paths}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
