"""`worldtune compare`: the 2x2 grid against separate camera views, same data, same budget.

"Tile the views or keep them separate?" This runs the whole pipeline twice from one config and
puts the answers side by side:

- **grid**: cameras packed into one `prepare.height` x `prepare.width` frame (the seed workflow);
- **separate**: the same episodes with every camera its own stream, trained as the multi-view model
  (models/multiview.py), each view at a size whose V views hold about the grid frame's tokens
  (`data.layout.view_size_for_grid`: 432x768 -> 256x432, exactly equal), so both runs cost about
  the same per step. Prompts use the `plain` template when the config's describes a grid.

Both get the same episodes (same clip choice and held-out split), base model, adapter settings,
learning-rate schedule, batch size and number of steps; both generate from the same held-out clips
and seeds; one evaluation scores both generation folders (per-camera temporal and cross-view
Sampson, the judge if configured) and one report shows both loss curves and both models' metrics.

Folders under `compare.out` (each stage's own documented format, each resumable on its own):

    dataset_grid/  run_grid/  gen_grid/                  the grid branch (adapter label "grid")
    dataset_separate/  run_separate/  gen_separate/      the separate-views branch (adapter label "separate")
    eval/  report/  compare.json                         both, side by side
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from worldtune.atomic import atomic_write_json
from worldtune.config import WorldtuneConfig

BRANCHES = ("grid", "separate")
console = Console()


def branch_config(cfg: WorldtuneConfig, layout: str) -> WorldtuneConfig:
    """The config of one branch: its own dataset, run and generation folders under compare.out."""
    from worldtune.data.layout import view_size_for_grid
    from worldtune.data.prepare import describes_grid

    root = Path(cfg.compare.out)
    c = cfg.model_copy(deep=True)
    c.prepare.layout = layout
    c.prepare.out = c.cache.dataset = c.train.dataset = c.generate.inputs = str(root / f"dataset_{layout}")
    if layout == "separate":
        grid = cfg.prepare.grid
        c.prepare.height, c.prepare.width = (cfg.compare.view_height, cfg.compare.view_width) if cfg.compare.view_height \
            else view_size_for_grid(cfg.prepare.height, cfg.prepare.width, (grid.rows, grid.cols), len(cfg.prepare.cameras))
        if describes_grid(cfg.prepare.prompt_template):
            c.prepare.prompt_template = "plain"
    c.train.out = str(root / f"run_{layout}")
    c.train.resume = "auto"
    c.generate.out = str(root / f"gen_{layout}")
    c.generate.adapters = []
    return c


def tokens_per_frame(c: WorldtuneConfig) -> int:
    """DiT tokens of one latent frame of the branch (8x VAE, 2x2 patches; V views for separate)."""
    views = len(c.prepare.cameras) if c.prepare.layout == "separate" else 1
    return views * (c.prepare.height // 16) * (c.prepare.width // 16)


def run(cfg: WorldtuneConfig, stage: Callable[[str, Callable[[], Any]], Any] | None = None) -> dict[str, Any]:
    """Both branches, then one evaluation and one report; returns per-branch training summaries."""
    from worldtune.cli import _stage as stage_fn

    stage = stage or _titled(4 * len(BRANCHES) + 2)
    root = Path(cfg.compare.out)
    summaries: dict[str, dict[str, Any]] = {}
    branches = {layout: branch_config(cfg, layout) for layout in BRANCHES}
    for layout, c in branches.items():
        stage(f"{layout}: prepare", lambda c=c: stage_fn("worldtune.data.prepare")(c.prepare))
        stage(f"{layout}: cache", lambda c=c: stage_fn("worldtune.data.cache")(c))
        summaries[layout] = stage(f"{layout}: train", lambda c=c: stage_fn("worldtune.train.trainer")(c)) or {}
        if summaries[layout].get("export"):
            c.generate.adapters = [{"path": summaries[layout]["export"], "name": layout}]
        stage(f"{layout}: generate", lambda c=c: stage_fn("worldtune.infer.generate")(c))
    ev = cfg.evaluate.model_copy(update={"runs": [c.generate.out for c in branches.values()], "out": str(root / "eval")})
    rep = cfg.report.model_copy(update={"eval": ev.out, "runs": [c.train.out for c in branches.values()],
                                        "out": str(root / "report"), "title": "worldtune: grid vs separate views"})
    stage("evaluate both", lambda: stage_fn("worldtune.eval.evaluate")(ev))
    stage("report", lambda: stage_fn("worldtune.eval.report")(rep))
    print_summary(branches, summaries, root)
    return {"branches": summaries, "report": str(Path(rep.out) / "report.html")}


def _titled(total: int) -> Callable[[str, Callable[[], Any]], Any]:
    """Run each stage under a numbered rule (`compare 3/10: grid: train`): a log shows how far the comparison is."""
    done = [0]

    def run(name: str, fn: Callable[[], Any]) -> Any:
        done[0] += 1
        console.rule(f"[bold]compare {done[0]}/{total}: {escape(name)}")
        return fn()

    return run


def print_summary(branches: dict[str, WorldtuneConfig], summaries: dict[str, dict[str, Any]], root: Path) -> None:
    """The training side of the comparison (the evaluation printed its own table)."""
    table = Table(title=f"worldtune compare: {root}")
    for col in ("layout", "size", "tokens/frame", "steps", "first loss", "last loss", "held-out", "train s"):
        table.add_column(col, justify="left" if col == "layout" else "right")
    for layout, c in branches.items():
        s = summaries.get(layout) or {}
        size = f"{c.prepare.height}x{c.prepare.width}" + (f" x {len(c.prepare.cameras)}" if layout == "separate" else "")

        def f(key: str) -> str:
            return f"{s[key]:.4f}" if isinstance(s.get(key), float) else "-"

        table.add_row(layout, size, str(tokens_per_frame(c)), str(s.get("steps", "-")), f("first_loss"), f("last_loss"),
                      f("val_loss"), str(s.get("seconds", "-")))
    console.print(table)
    atomic_write_json(root / "compare.json",
                      {"branches": {k: {"layout": k, "height": c.prepare.height, "width": c.prepare.width,
                                        "tokens_per_latent_frame": tokens_per_frame(c), "train": summaries.get(k)}
                                    for k, c in branches.items()}}, default=str)
    console.print(f"report: {root / 'report' / 'report.html'}")
