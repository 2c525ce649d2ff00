"""`worldtune demo`: every stage, end to end, on the tiny model, in one run folder.

It is the first thing a new user runs and the project's end-to-end check: a synthetic
three-camera LeRobot v3 dataset -> prepared 2x2 grid clips -> cached latents and embeddings ->
LoRA training with the rectified-flow loss -> generation with the base model and the adapter
(2 seeds per held-out clip, grids split into cameras; a seed model: one seed, and a second for every
held-out clip, or `--seed-inputs` of them) -> Sampson evaluation -> an inverse-dynamics
model trained on the dataset's actions -> the generated videos labelled and written as a LeRobot
v3.0 dataset with their scores -> HTML report.
Every stage reads and writes the same folders a user's own run would, through the same code.
With `--compare-views` it then runs `worldtune compare` on the same data (`<out>/compare`): the
grid and the three-view model side by side, with one report.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.table import Table

from worldtune.config import WorldtuneConfig, load_config
from worldtune.errors import NotBuiltError

console = Console()


DEFAULT_MODEL = "seed-predict2.5"


def model_overrides(model: str) -> list[str]:
    """What a model changes in the demo recipe: clips of its size; for a seed model (trained, slower on a CPU)
    held-out episodes enough for a confidence interval, one seed each, and a LoRA of the seed's width."""
    from worldtune.models.registry import get_spec

    spec = get_spec(model)
    sized = ["--prepare.height", str(spec.height), "--prepare.width", str(spec.width)]
    if not spec.weights:
        return sized
    return [*sized, "--prepare.val_fraction", "0.4", "--generate.seeds", "[0]", "--generate.steps", "8",
            "--generate.guidance", "3.0", "--train.lora.rank", "16", "--train.lr", "2e-3", "--train.batch_size", "2",
            "--train.val_every", "0", "--train.val_videos", "0", "--train.cond_frames_probs", "{1 = 1.0}"]


def default_steps(model: str) -> int:
    """LoRA steps of the demo: a seed model's step costs ~10x a tiny one's on a CPU and learns faster."""
    from worldtune.models.registry import get_spec

    return 100 if get_spec(model).weights else 200


def _seed_recipe(model: str):
    """The recipe a seed model was made with; None for a model without shipped weights (a tiny random one)."""
    from worldtune.models.registry import get_spec

    if not get_spec(model).weights:
        return None
    from worldtune.seed import shipped_recipe

    return shipped_recipe(model)


def demo_data(model: str) -> dict[str, Any]:
    """The demo dataset's settings: a seed model's held-out tasks at its recipe's camera size (what the base
    never saw, so post-training has something to teach); the classic small scene for a tiny random model."""
    r = _seed_recipe(model)
    if r is None:
        return {}
    return {"episodes": 30, "height": r.camera_height, "width": r.camera_width, "targets": r.held_out,
            "motion": r.motion, "place_on": r.held_out_place, "arm": r.arm}


def trains_actions(model: str) -> bool:
    """Whether the demo of `model` is the action one by default: a seed model made with the robot's actions."""
    r = _seed_recipe(model)
    return r is not None and r.actions


def action_overrides(out: Path) -> list[str]:
    """The action demo: clips with the robot's actions, a forward-dynamics adapter, and `evaluate.mode = actions`
    (the held-out clips' own and another episode's actions, labelled back by the demo's IDM)."""
    o = str(out)
    return ["--prepare.actions.key", "action", "--train.task", "forward_dynamics", "--evaluate.mode", "actions",
            "--evaluate.metrics", '["pixels", "sampson_temporal", "ee_track_error"]', "--evaluate.actions.dataset", f"{o}/dataset",
            "--evaluate.actions.adapters", f'[{{path = "{o}/runs/lora/export", name = "fd"}}]',
            "--evaluate.actions.steps", "8", "--evaluate.actions.idm", f"{o}/runs/idm",
            "--evaluate.actions.labellers", '["idm", "cosmos3"]', "--trajectories.cosmos3.dataset", f"{o}/dataset",
            "--trajectories.cosmos3.steps", "8"]


def demo_config(out: Path, steps: int, model: str = "tiny-predict2.5", actions: bool = False,
                overrides: Sequence[str] = ()) -> WorldtuneConfig:
    """The demo recipe (configs/demo.toml): 17-frame grid clips of the model's size; with `actions`, forward
    dynamics on the robot's actions instead of text-and-image to video. `overrides` (dotted `--section.key value`,
    applied last) make a smaller run of the same recipe, as the learning tests do."""
    o = str(out)
    return load_config(None, [
        "--model.path", f"{o}/model",
        "--prepare.source", f"{o}/lerobot", "--prepare.out", f"{o}/dataset", "--prepare.workers", "2",
        "--cache.dataset", f"{o}/dataset", "--cache.dtype", "fp32",
        "--train.dataset", f"{o}/dataset", "--train.out", f"{o}/runs/lora", "--train.steps", str(steps),
        "--train.lr", "5e-3", "--train.warmup", "20", "--train.log_every", "10", "--train.val_every", "50",
        "--train.checkpoint.every", "100", "--train.resume", "auto",
        "--generate.inputs", f"{o}/dataset", "--generate.out", f"{o}/generations", "--generate.steps", "12",
        "--generate.seeds", "[0, 1]", "--generate.adapters", f'[{{path = "{o}/runs/lora/export"}}]',
        "--evaluate.runs", f'["{o}/generations"]', "--evaluate.out", f"{o}/eval",
        "--report.eval", f"{o}/eval", "--report.runs", f'["{o}/runs/lora"]', "--report.out", f"{o}/report",
        "--compare.out", f"{o}/compare",
        "--idm.dataset", f"{o}/lerobot", "--idm.out", f"{o}/runs/idm", "--idm.steps", "200", "--idm.resume", "auto",
        "--trajectories.generations", f"{o}/generations", "--trajectories.idm", f"{o}/runs/idm",
        "--trajectories.evaluation", f"{o}/eval", "--trajectories.out", f"{o}/trajectories",
        *model_overrides(model), *(action_overrides(out) if actions else []), *overrides,
    ])


def _model_spec_name(folder: Path) -> str | None:
    """The registry spec a folder written by `model init` was built from."""
    from worldtune.models.load import SIDECAR

    try:
        return json.loads((folder / SIDECAR).read_text())["spec"]
    except (OSError, ValueError, KeyError):
        return None


def _stage(name: str, fn: Callable[[], Any], timings: dict[str, float], notes: dict[str, str]) -> Any:
    console.rule(f"[bold]{name}")
    t0 = time.time()
    try:
        result = fn()
        notes[name] = "done"
        return result
    except NotBuiltError as e:
        notes[name] = f"skipped: {e}"
        console.print(f"[yellow]{name} skipped[/]: {e}")
        return None
    finally:
        timings[name] = time.time() - t0


def seed_overrides(cfg: WorldtuneConfig, inputs: int | None) -> list[str] | None:
    """The generate overrides that add one noise seed, for every held-out input (`inputs` None) or the first
    `inputs`, so that evaluation can tell what the input sets from what the seed sets (worldtune.eval.seed_spread);
    None where the recipe already generates several seeds per input, or `inputs` is 0.

    Every input by default: the means and paired differences of evaluation count each video, so a second seed for
    only some inputs would weigh those inputs double in every other figure of the demo."""
    if inputs is not None and inputs <= 0 or len(cfg.generate.seeds) > 1:
        return None
    more = ["--generate.seeds", f"[{max(cfg.generate.seeds) + 1}]"]
    return more if inputs is None else [*more, "--generate.max_inputs", str(inputs)]


def run(out: str = "demo_out", steps: int | None = None, compare_views: bool = False, only_data: bool = False,
        model: str = DEFAULT_MODEL, actions: bool | None = None,
        seed_inputs: int | None = None) -> dict[str, Any]:
    """`worldtune demo`; with `only_data`, write only the synthetic dataset and the tiny model (the
    inputs of configs/demo.toml's commands) and stop. `model`: a tiny spec of any family. `actions` (default: a
    seed model made with actions): forward-dynamics post-training, scored under own and other actions and
    labelled back by the IDM, instead of generation from text and a first frame. `seed_inputs`: held-out inputs also
    generated under a second noise seed, where the recipe makes one seed per input (the report's "across inputs /
    across seeds" figure; None: all of them, 0: none)."""
    from worldtune.errors import ConfigError
    from worldtune.models.registry import get_spec

    if not get_spec(model).tiny:
        raise ConfigError(f"the demo runs a tiny model on the CPU; {model} is real-size: use tiny-predict2.5 or "
                          f"tiny-cosmos3")
    from worldtune.cli import _stage as stage_fn
    from worldtune.models.load import init_model_dir
    from worldtune.scene.writer import write_demo_dataset

    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    steps = steps or default_steps(model)
    actions = trains_actions(model) if actions is None else actions
    if actions and compare_views:
        raise ConfigError("--compare-views compares video models; run it without --actions")
    cfg = demo_config(root, steps, model, actions)
    timings: dict[str, float] = {}
    notes: dict[str, str] = {}
    t_all = time.time()
    if not (root / "lerobot" / "meta" / "info.json").exists():
        _stage("dataset", lambda: write_demo_dataset(root / "lerobot", **demo_data(model)), timings, notes)
    if not (root / "model" / "model_index.json").exists():
        _stage("model", lambda: init_model_dir(model, root / "model"), timings, notes)
    elif _model_spec_name(root / "model") != model:
        raise ConfigError(f"{root / 'model'} holds {_model_spec_name(root / 'model')}, not {model}: use another --out")
    if only_data:
        console.print(f"wrote the demo dataset {root / 'lerobot'} and model {root / 'model'}")
        return {"timings": timings, "notes": notes}
    _stage("prepare", lambda: stage_fn("worldtune.data.prepare")(cfg.prepare), timings, notes)
    _stage("cache", lambda: stage_fn("worldtune.data.cache")(cfg), timings, notes)
    summary = _stage("train", lambda: stage_fn("worldtune.train.trainer")(cfg), timings, notes) or {}
    plot = Path(cfg.train.out) / "loss.png"
    export = summary.get("export")
    if actions:  # the IDM first: evaluation labels the forward-dynamics videos back with it
        _stage("idm", lambda: stage_fn("worldtune.idm.train")(cfg), timings, notes)
        _stage("evaluate", lambda: stage_fn("worldtune.eval.evaluate")(cfg), timings, notes)
    else:
        _stage("generate", lambda: stage_fn("worldtune.infer.generate")(cfg), timings, notes)
        more = seed_overrides(cfg, seed_inputs)
        if more:
            seeded = demo_config(root, steps, model, actions, overrides=more)
            _stage("generate seeds", lambda: stage_fn("worldtune.infer.generate")(seeded), timings, notes)
        _stage("evaluate", lambda: stage_fn("worldtune.eval.evaluate")(cfg.evaluate), timings, notes)
        _stage("idm", lambda: stage_fn("worldtune.idm.train")(cfg), timings, notes)
        shutil.rmtree(cfg.trajectories.out, ignore_errors=True)  # the demo rewrites its dataset on every run
        _stage("trajectories", lambda: stage_fn("worldtune.trajectories")(cfg), timings, notes)
    _stage("report", lambda: stage_fn("worldtune.eval.report")(cfg.report), timings, notes)
    if compare_views:
        from worldtune.compare import run as compare

        compare(cfg, stage=lambda name, fn: _stage(f"compare {name}", fn, timings, notes))

    table = Table(title=f"worldtune demo ({time.time() - t_all:.0f} s)")
    for col in ("stage", "status", "seconds"):
        table.add_column(col)
    for name, secs in timings.items():
        table.add_row(name, notes.get(name, ""), f"{secs:.1f}")
    console.print(table)
    where = {
        "dataset": root / "dataset", "run": Path(cfg.train.out), "loss curve": plot, "adapter": export,
        "generations": Path(cfg.generate.out), "evaluation": Path(cfg.evaluate.out),
        "idm report": Path(cfg.idm.out) / "idm_report.json", "trajectories": Path(cfg.trajectories.out),
        "report": Path(cfg.report.out) / "report.html",
        "comparison": Path(cfg.compare.out) / "report" / "report.html" if compare_views else None,
    }
    for k, v in where.items():
        if v is not None and Path(v).exists():
            console.print(f"{k:>12}: {v}")
    return {"timings": timings, "notes": notes, "train": summary}
