"""`worldtune seed NAME --out DIR`: make a seed model from scratch, with worldtune's own stages.

A seed model is a small model of the real classes trained on the synthetic tabletop scene, so that the demo,
the tests and the reports measure a model that has learned something (random weights decode to flat grey).
The recipe is the one a latent video model is made with, every step an ordinary worldtune stage:

1. data: a LeRobot v3 dataset of the scene (DROID-size 180x320 cameras, a wrist camera, the exterior
   cameras re-placed per episode) whose tasks leave some out (`held_out`): the demo post-trains on those,
   so the adapter has something to learn that the base does not know;
2. `worldtune prepare`: 2x2 grid clips at the model's size;
3. `worldtune autoencoder`: the VAE from scratch (reconstruction losses, held-out PSNR);
4. a model folder: the spec's random start with the trained VAE;
5. `worldtune cache`, then `worldtune train` with `train.mode = "full"`: the transformer from its random
   start, with the family's own rectified-flow objective, on the VAE's latents;
6. pack: fp16 weights and `seed.json` (recipe, scene version, steps, seconds, curves) into the seed folder.

`--continue` trains the shipped seed further instead: its VAE and transformer are the start (no autoencoder
step), the transformer gets a fresh optimizer and schedule, and `seed.json` keeps what made the weights and gains
this run (data, settings, steps, seconds, curves) in `transformer.runs`.

Each step resumes (checkpoints, atomic outputs, exit 42 on SIGTERM/SIGUSR1), so the recipe runs in chunks of
a few minutes on a GPU lent by the hour, and again from where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from worldtune.config import WorldtuneConfig, load_config
from worldtune.console import plain
from worldtune.errors import ConfigError

if TYPE_CHECKING:
    from worldtune.models.action_dynamics import ActionDomain
    from worldtune.scene.episode import ArmLook


@dataclass(frozen=True)
class SeedRecipe:
    """How one seed model is made (every number a flag of the stage it goes to)."""

    spec: str
    episodes: int = 500  # pre-training episodes of the scene
    targets: tuple[str, ...] = ("red", "blue")  # tasks seen in pre-training
    held_out: tuple[str, ...] = ("green",)  # tasks left for the demo's post-training
    held_out_place: str = "bowl"  # where the held-out tasks put their block: the bowl, or on a block (stacking)
    rig_jitter: float = 0.04  # metres the exterior cameras move between episodes
    data_seed: int = 1  # episodes other than the demo's (seed 0), in the same room
    motion: Literal["scripted", "varied"] = "scripted"  # the arm's path: one script, or drawn per episode
    arm: ArmLook = "grey"  # the arm's look in the scene (the shipped seeds: grey; "bold": near black and thicker)
    camera_height: int = 180
    camera_width: int = 320
    vae_steps: int = 2400
    vae_batch: int = 8
    vae_frames: int | None = None  # training windows: None = the clips' own 17 frames (shorter ones leave the later
    # chunks' causal cache untrained: the shipped VAEs, trained on 9, decoded frames 13-16 at 21 dB before their decoders
    # trained on whole clips)
    vae_lr: float = 5e-4
    vae_from: Literal["scratch", "shipped"] = "scratch"  # the autoencoder's start: the spec's random VAE, or the
    # shipped seed's (a fine-tune when the scene's look changes: the shipped VAE already knows the room)
    transformer: dict[str, Any] = field(default_factory=dict)  # the transformer's config changed from the spec's
    # (the next seed's architecture; the registry's spec takes the same values when its weights ship)
    steps: int = 8000
    batch: int = 32
    lr: float = 1e-3
    warmup: int = 300
    cond_frames_probs: str = "{0 = 0.2, 1 = 0.6, 2 = 0.2}"  # clean latent frames (text, image and video to world)
    actions: bool = False  # trained with the robot's actions (NVIDIA's joint action mode); the demo post-trains them
    stage_overrides: tuple[str, ...] = ("--cache.text", "raw")  # what the family's recipe sets beyond the above


RECIPES: dict[str, SeedRecipe] = {
    # The held-out task stacks the green block on the blue cube: a destination the pre-training never shows, so a base
    # that generalises from red and blue to green (the colour) still has the task's motion to learn.
    #
    # The next seeds (not shipped yet; the shipped weights' own recipe is in their seed.json, and what the demo renders
    # follows it): the arm near black and thicker, so that it spans more tokens at twice the contrast, and the VAEs
    # fine-tuned from the shipped ones on that look, on whole 17-frame clips. Cosmos 3 also takes a latent patch of 1:
    # its 16x VAE and a patch of 2 gave each 64x112 view 2x3.5 tokens and the arm a fifth of one
    # (benchmarks/arm_look.py). seed-predict2.5 keeps its patch of 2 (4x7 tokens per view): a patch of 1 costs 6x per
    # forward on the CPU (0.79 -> 4.7 s on 2 cores), beyond what the demo's 5 minutes allow.
    "seed-predict2.5": SeedRecipe("seed-predict2.5", held_out_place="blue", arm="bold", vae_from="shipped",
                                  vae_steps=1000),
    # Cosmos 3 with actions from the start: NVIDIA's joint action mode (forward dynamics, inverse dynamics and
    # policy, one per clip) on the scene robot's actions, in the robot's own embodiment-domain slot. Its episodes
    # draw the arm's path, so that the video follows the actions, not only the instruction; forward dynamics is drawn
    # for 4 clips of 6 (a model that can predict the scene without its actions learns to read them that way).
    "seed-cosmos3": SeedRecipe(
        "seed-cosmos3", vae_steps=1000, batch=64, cond_frames_probs="{1 = 1.0}", actions=True, motion="varied",
        arm="bold", vae_from="shipped", transformer={"latent_patch_size": 1},
        stage_overrides=("--train.dynamics.mode_weights", "{forward_dynamics = 4, inverse_dynamics = 1, policy = 1}")),
}


ACTION_TASK = "joint"  # a recipe with actions: forward dynamics, inverse dynamics and policy, drawn per clip


def recipe_for(name: str) -> SeedRecipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise ConfigError(f"no seed recipe named {name}: one of {', '.join(RECIPES)}") from None


def shipped_recipe(name: str) -> SeedRecipe:
    """The registered recipe with the scene look the shipped weights were made on (their seed.json's `arm`; "grey"
    for seeds made before it was an option): the registered recipe may already describe the next seed, and the demo
    and `--continue` must render the scene the shipped weights know."""
    from worldtune.models.seeds import read_manifest

    return dataclasses.replace(recipe_for(name), arm=read_manifest(name).get("recipe", {}).get("arm", "grey"))


def trained_action_domain(name: str) -> ActionDomain | None:
    """The embodiment slot whose action rows a shipped seed model trained both ways (in: forward dynamics; out: inverse
    dynamics and policy), or None for a seed made without actions. A recipe with actions trains ACTION_TASK on the
    scene robot's actions in the slot `worldtune prepare` gives that robot, which this resolves the same way; the
    shipped manifest's recipe (what the weights were made with) says whether actions were trained, so a labeller can
    tell a slot the seed learned from one it never saw."""
    from worldtune.models.family import action_dynamics
    from worldtune.models.registry import get_spec
    from worldtune.models.seeds import read_manifest
    from worldtune.scene.episode import ACTION_NAMES, ROBOT_TYPE

    if not read_manifest(name).get("recipe", {}).get("actions"):
        return None
    return action_dynamics(get_spec(name)).resolve_domain(None, None, len(ACTION_NAMES), ROBOT_TYPE,
                                                          f"the {name} recipe's scene")


def seed_config(recipe: SeedRecipe, work: Path, overrides: list[str] | None = None) -> WorldtuneConfig:
    """The stages' config of a recipe, every folder under `work` (overrides: dotted `--section.key value`)."""
    from worldtune.models.registry import get_spec

    spec = get_spec(recipe.spec)
    w = str(work)
    return load_config(None, [
        "--model.path", f"{w}/model",
        "--prepare.source", f"{w}/lerobot", "--prepare.out", f"{w}/dataset",
        "--prepare.height", str(spec.height), "--prepare.width", str(spec.width),
        "--prepare.num_frames", str(spec.num_frames), "--prepare.clip_policy", "sliding",
        "--prepare.overlap", str(spec.num_frames - 4), "--prepare.val_fraction", "0.02",
        "--prepare.workers", str(max(1, min(16, os.cpu_count() or 1))), "--prepare.preset", "veryfast",
        "--autoencoder.dataset", f"{w}/dataset", "--autoencoder.out", f"{w}/runs/vae",
        "--autoencoder.steps", str(recipe.vae_steps), "--autoencoder.batch_size", str(recipe.vae_batch),
        "--autoencoder.lr", str(recipe.vae_lr), "--autoencoder.val_every", "500", "--autoencoder.log_every", "100",
        "--autoencoder.checkpoint_every", "1000",
        "--cache.dataset", f"{w}/dataset", "--cache.batch_size", "16",
        "--train.dataset", f"{w}/dataset", "--train.out", f"{w}/runs/transformer", "--train.mode", "full",
        "--train.steps", str(recipe.steps), "--train.batch_size", str(recipe.batch), "--train.lr", str(recipe.lr),
        "--train.warmup", str(recipe.warmup), "--train.f_max", "1.0", "--train.f_min", "0.05",
        "--train.ema", "0.999", "--train.cond_frames_probs", recipe.cond_frames_probs,
        "--train.compile", "false", "--train.grad_checkpointing", "off",
        "--train.val_every", "1000", "--train.val_samples", "16",
        "--train.val_videos", "0", "--train.log_every", "50", "--train.checkpoint.every", "1000",
        "--train.checkpoint.keep", "1", "--train.resume", "auto", "--train.tensorboard", "false",
        *(("--autoencoder.frames", str(recipe.vae_frames)) if recipe.vae_frames else ()),
        *(("--prepare.actions.key", "action", "--train.task", ACTION_TASK) if recipe.actions else ()),
        *recipe.stage_overrides, *(overrides or []),
    ])


def _run_info(run: Path) -> dict[str, Any]:
    """A run folder's `run.json` ({} before it has one)."""
    try:
        return json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def _done(run: Path) -> bool:
    return _run_info(run).get("status") == "done"


def write_data(recipe: SeedRecipe, root: Path) -> Path:
    """The pre-training episodes (every task but the held-out ones)."""
    from worldtune.scene.writer import write_demo_dataset

    if (root / "meta" / "info.json").is_file():
        return root
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_demo_dataset(tmp, episodes=recipe.episodes, seed=recipe.data_seed, texture_seed=0,
                       height=recipe.camera_height, width=recipe.camera_width, targets=recipe.targets,
                       rig_jitter=recipe.rig_jitter, workers=max(1, min(16, os.cpu_count() or 1)),
                       episodes_per_file=50, motion=recipe.motion, arm=recipe.arm)
    tmp.rename(root)
    return root


def assemble_model(recipe: SeedRecipe, vae_folder: Path, out: Path, shipped: bool = False) -> Path:
    """The spec's random start with the trained VAE in place of its random one; with `shipped`, the shipped seed
    (VAE and transformer) as it loads from the registry."""
    from worldtune.models.load import init_model_dir

    if (out / "model_index.json").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    init_model_dir(recipe.spec, tmp, random_weights=not shipped)
    if not shipped:
        shutil.rmtree(tmp / "vae")
        shutil.copytree(vae_folder, tmp / "vae")
        if recipe.transformer:
            from worldtune.models.build import build_transformer, seeded, with_transformer_changes
            from worldtune.models.registry import get_spec

            shutil.rmtree(tmp / "transformer")
            with seeded(0):
                model = build_transformer(with_transformer_changes(get_spec(recipe.spec), recipe.transformer))
            model.save_pretrained(tmp / "transformer", safe_serialization=True)
    tmp.rename(out)
    return out


def _started_steps(run: Path) -> int | None:
    """`train.steps` of a transformer run that has checkpoints to resume from (None: it starts afresh)."""
    if not any((run / "checkpoints").glob("step-*")):
        return None
    try:
        return int(_run_info(run)["steps"])
    except (KeyError, TypeError, ValueError):
        return None


def _curve(run: Path, key: str) -> list[list[float]]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [[r["step"], round(r[key], 4)] for r in rows if key in r]


def provenance(recipe: SeedRecipe, work: Path, seconds: dict[str, float]) -> dict[str, Any]:
    """What `seed.json` records: the recipe, the scene's version, what each stage reached and how long it took."""
    from worldtune.scene.episode import SCENE_VERSION

    vae_run, dit_run = work / "runs" / "vae", work / "runs" / "transformer"
    vae = json.loads((vae_run / "run.json").read_text()).get("summary", {})
    dit = json.loads((dit_run / "run.json").read_text()).get("summary", {})
    return {
        "name": recipe.spec, "recipe": dataclasses.asdict(recipe), "scene_version": SCENE_VERSION,
        "command": f"worldtune seed {recipe.spec} --out DIR",
        "autoencoder": {"steps": vae.get("steps"), "held_out_psnr_db": vae.get("val_psnr"),
                        "psnr_curve": _curve(vae_run, "val_psnr"), "loss_curve": _curve(vae_run, "loss")[::5]},
        "transformer": {"steps": dit.get("steps"), "first_loss": dit.get("first_loss"),
                        "last_loss": dit.get("last_loss"), "val_loss_curve": _curve(dit_run, "val_loss"),
                        "loss_curve": _curve(dit_run, "loss")[::4]},
        "seconds_this_call": seconds,
    }


def continued_provenance(recipe: SeedRecipe, cfg: WorldtuneConfig, seconds: dict[str, float],
                         command: str) -> dict[str, Any]:
    """The shipped seed's `seed.json` with this run of its transformer added (`--continue`): what made the weights
    before stays, the new run says where it started, on what data, with which settings, for how long."""
    from worldtune.models.seeds import read_manifest
    from worldtune.scene.episode import SCENE_VERSION

    before = read_manifest(recipe.spec)
    manifest = {k: v for k, v in before.items() if k != "vae_config"}
    dit_run = Path(cfg.train.out)
    info = _run_info(dit_run)
    summary = info.get("summary", {})
    t = cfg.train
    entry = {
        "from": "the shipped weights, a fresh optimizer and schedule",
        "data": f"{recipe.episodes} episodes, motion = {recipe.motion} (data seed {recipe.data_seed}, tasks "
                f"{' and '.join(recipe.targets)})",
        **({"mode_weights": dict(t.dynamics.mode_weights)} if recipe.actions else {}),
        "steps": summary.get("steps", t.steps), "batch": t.batch_size, "lr": t.lr, "warmup": t.warmup, "ema": t.ema,
        "device": _device_name(info.get("device")), "seconds": summary.get("train_seconds", summary.get("seconds")),
        "start": info.get("base_fingerprint"),
        "val_loss": summary.get("val_loss") and round(summary["val_loss"], 4), "val_loss_by_mode": {
            k.removeprefix("val_loss_"): round(v, 4) for k, v in summary.items() if k.startswith("val_loss_")},
        "val_loss_curve": _curve(dit_run, "val_loss"), "loss_curve": _curve(dit_run, "loss")[::4],
    }
    transformer = dict(before.get("transformer", {}))
    runs = list(transformer.get("runs", []))
    if not runs:  # a seed made before any continued run: what made it first, all its steps
        runs.append({**{k: transformer.get(k) for k in ("val_loss_curve", "loss_curve", "started_from")},
                     "steps": transformer.get("total_steps", transformer.get("steps"))})
    if runs[-1].get("start") == entry["start"]:  # packed again (the command run once more): the same run, replaced
        runs.pop()
    runs.append(entry)
    total = sum(int(r.get("steps") or 0) for r in runs)
    transformer.update(runs=runs, steps=total, total_steps=total)
    manifest.update(transformer=transformer, command=f"{before.get('command', '')}; then {command}",
                    scene_version=SCENE_VERSION, seconds_this_call=seconds)
    return manifest


def _device_name(device: str | None) -> str | None:
    """What trained a run, in words: the GPU's name, or the CPU's core count."""
    import torch

    if device and device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU, {os.cpu_count()} cores" if device == "cpu" else device


def fit_steps(cfg: WorldtuneConfig, seconds_left: float, work: Path) -> int:
    """Transformer steps that fit in `seconds_left`: a short probe run measures this machine's step time (the
    recipe's learning-rate schedule then ends where the time does, instead of being cut by a kill)."""
    from worldtune.cli import _stage as stage_fn

    probe = work / "runs" / "probe"
    shutil.rmtree(probe, ignore_errors=True)
    tc = cfg.train.model_copy(update={"out": str(probe), "steps": 40, "log_every": 10, "val_every": 0,
                                      "resume": None, "checkpoint": cfg.train.checkpoint.model_copy(
                                          update={"every": 0})})
    t0 = time.time()
    stage_fn("worldtune.train.trainer")(cfg.model_copy(update={"train": tc}))
    rows = [json.loads(x) for x in (probe / "metrics.jsonl").read_text().splitlines() if x.strip()]
    per_step = sorted(r["step_time"] for r in rows if "step_time" in r)[len(rows) // 2]
    shutil.rmtree(probe, ignore_errors=True)
    steps = int((seconds_left - (time.time() - t0) - 60) / max(per_step, 1e-3))
    plain(f"seed: {per_step:.3f} s/step on this machine; {steps} steps fit in the time left")
    return max(100, min(cfg.train.steps, steps))


def run(name: str, out: str, overrides: list[str] | None = None, ship: str | None = None,
        recipe: SeedRecipe | None = None, budget_s: float | None = None,
        stop_after: str | None = None, continue_shipped: bool = False, episodes: int | None = None,
        data_seed: int | None = None, command: str = "") -> dict[str, Any]:
    """Every step of the recipe that is not done yet; `ship` (default: the package's seed folder) receives the
    packed weights once the transformer is trained. `recipe` replaces the registered one (tests: a small one).
    `budget_s`: a fresh transformer run takes as many steps as fit in what is left of these seconds.
    `stop_after`: end after that step (one of STEPS before the transformer). `continue_shipped`: start from the
    shipped seed's weights (no autoencoder step) and add this run to its `seed.json` (module docstring).
    `episodes`, `data_seed`: the recipe's, replaced (`data_seed`: new episodes of the same tasks). `command`: the
    command line, for `seed.json`."""
    if stop_after is not None and stop_after not in STEPS:
        raise ConfigError(f"--stop-after {stop_after}: use one of {', '.join(STEPS)}")
    t_start = time.time()
    from worldtune.cli import _stage as stage_fn
    from worldtune.models.seeds import pack_seed

    recipe = recipe or (shipped_recipe(name) if continue_shipped else recipe_for(name))
    recipe = dataclasses.replace(recipe, **{k: v for k, v in (("episodes", episodes), ("data_seed", data_seed))
                                            if v is not None})
    work = Path(out)
    work.mkdir(parents=True, exist_ok=True)
    cfg = seed_config(recipe, work, overrides)
    seconds: dict[str, float] = {}

    def step(label: str, fn) -> Any:
        t0 = time.time()
        plain(f"seed {name}: {label}")
        try:
            return fn()
        finally:
            seconds[label] = round(time.time() - t0, 1)
            plain(f"seed {name}: {label} took {seconds[label]:.0f} s")
            if label == stop_after:
                raise _Stop

    vae_run = Path(cfg.autoencoder.out)
    try:
        step("data", lambda: write_data(recipe, work / "lerobot"))
        step("prepare", lambda: (work / "dataset" / "info.json").is_file() or stage_fn("worldtune.data.prepare")(
            cfg.prepare))
        step("autoencoder", lambda: continue_shipped or _done(vae_run) or stage_fn("worldtune.train.autoencoder")(
            _autoencoder_start_cfg(cfg, recipe, work)))
        step("model", lambda: assemble_model(recipe, vae_run / "vae", work / "model", shipped=continue_shipped))
        step("cache", lambda: stage_fn("worldtune.data.cache")(cfg))
    except _Stop:
        plain(f"seed {name}: stopped after {stop_after}; run the command again to go on")
        return {"seed": None, "seconds": seconds}
    dit_run = Path(cfg.train.out)
    if not _done(dit_run):
        steps = _started_steps(dit_run)  # a run that resumes keeps the length (and schedule) it started with
        if steps is None and budget_s is not None:
            steps = step("probe", lambda: fit_steps(cfg, budget_s - (time.time() - t_start), work))
        if steps is not None:
            cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": steps})})
        step("transformer", lambda: stage_fn("worldtune.train.trainer")(cfg))
    packed_model = work / "packed"
    if not (packed_model / "model_index.json").is_file():
        shutil.rmtree(packed_model, ignore_errors=True)
        shutil.copytree(work / "model", packed_model)
        shutil.rmtree(packed_model / "transformer")
        shutil.copytree(dit_run / "export" / "transformer", packed_model / "transformer")
    made = (continued_provenance(recipe, cfg, seconds, command) if continue_shipped else
            provenance(recipe, work, seconds))
    dest = pack_seed(packed_model, name, made, Path(ship) if ship else None)
    plain(f"seed {name}: weights packed into {dest}")
    return {"seed": str(dest), "seconds": seconds}


STEPS = ("data", "prepare", "autoencoder", "model", "cache")  # the steps `stop_after` may name


class _Stop(Exception):
    """`stop_after`'s step is done."""


def _autoencoder_start_cfg(cfg: WorldtuneConfig, recipe: SeedRecipe, work: Path) -> WorldtuneConfig:
    """The config whose `[model]` the autoencoder starts from: the spec's random start (`vae_from = "scratch"`: the
    VAE is trained before any model folder exists), or a folder of the shipped seed (`"shipped"`)."""
    if recipe.vae_from == "shipped":
        from worldtune.models.load import init_model_dir

        start = work / "vae_start"
        if not start.is_dir():
            tmp = start.with_name(start.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            init_model_dir(recipe.spec, tmp)
            tmp.rename(start)
        model = cfg.model.model_copy(update={"path": str(start), "name": None})
    else:
        model = cfg.model.model_copy(update={"path": None, "name": recipe.spec})
    return cfg.model_copy(update={"model": model})
