"""The `worldtune` command line: one subcommand per stage.

Each stage command takes an optional TOML config and dotted overrides
(`worldtune train configs/demo.toml --train.steps 50`), resolves the typed config, and calls the
stage's `run(...)` function. `--help` lists the config keys a stage reads (from the typed fields
of `worldtune.config`), `--print-config` prints them resolved. Our own errors and every usage
error print without a traceback and exit non-zero.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Optional

import typer

from worldtune import __version__
from worldtune.errors import NotBuiltError, WorldtuneError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Post-train Cosmos world models on robot data, generate videos, and score them.")
model_app = typer.Typer(no_args_is_help=True, help="Build, inspect and plan models.")
launch_app = typer.Typer(no_args_is_help=True, help="Launch training on several GPUs or under SLURM.")
idm_app = typer.Typer(no_args_is_help=True, help="Inverse-dynamics models: actions from video frames.")
app.add_typer(model_app, name="model")
app.add_typer(launch_app, name="launch")
app.add_typer(idm_app, name="idm")

_STAGE_CTX = {"allow_extra_args": True, "ignore_unknown_options": True}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"worldtune {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Post-train Cosmos world models on robot data, generate videos, and score them."""


def _stage(module: str, func: str = "run") -> Callable[..., Any]:
    """Import a stage's entry point, or say in one line that the stage is not built yet."""
    from worldtune.console import quiet_libraries

    quiet_libraries()
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("worldtune"):
            raise NotBuiltError(f"this stage ({module}) is not built yet") from None
        raise
    return getattr(mod, func)


def config_help(*sections: str, also: str = "") -> str:
    """The `--help` epilog of a stage: every key of its config sections with type, default and meaning."""
    from rich.markup import escape

    from worldtune.config import WorldtuneConfig, describe_fields

    lines = [escape(f"Config keys (set in a TOML file or as --section.key VALUE; --print-config shows them "
                    f"resolved){also}:"), ""]
    for section in sections:
        for key, kind, default, text in describe_fields(WorldtuneConfig.model_fields[section].annotation, section):
            default = default if len(default) <= 48 else default[:45] + "..."
            lines.append(escape(f"{key}: {kind} = {default}" + (f"  {text}" if text else "")))
    return "\n".join(lines)


def stage_command(*sections: str, also: str = "") -> dict[str, Any]:
    """Settings of a stage command that reads a config: extra args are overrides, the epilog lists the keys."""
    return {"context_settings": _STAGE_CTX, "epilog": config_help(*sections, also=also)}


def _resolve(config: Optional[str], ctx: typer.Context, print_config: bool, sections: tuple[str, ...] | None = None):
    """Load the config; with --print-config print the sections the stage reads (loadable back) and exit."""
    from worldtune.config import dump_config, load_config

    args = list(ctx.args)
    if config is not None and config.startswith("--"):  # no config file: the first override was taken for it
        config, args = None, [config, *args]
    cfg = load_config(config, args)
    if print_config:
        typer.echo(dump_config(cfg, list(sections) if sections else None), nl=False)
        raise typer.Exit(0)
    return cfg


_CONFIG_ARG = typer.Argument(None, help="TOML config file (optional: every field has a default)")
_PRINT = typer.Option(False, "--print-config", help="Print the resolved config and exit.")
_ALL = ("model", "prepare", "cache", "train", "generate", "evaluate", "report", "compare")


@app.command(**stage_command("prepare", "model", "cache", also=" (model and cache: with --cache only)"))
def prepare(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT,
            with_cache: bool = typer.Option(False, "--cache", help="also cache latents and text embeddings in the "
                                            "same pass, keeping only held-out and preview clips as mp4 "
                                            "(cache.keep_clips)")) -> None:
    """Turn a LeRobot dataset into training clips (grid or separate views), with a report."""
    if with_cache:
        cfg = _resolve(config, ctx, print_config, ("model", "prepare", "cache"))
        _stage("worldtune.data.stream")(cfg)
        return
    cfg = _resolve(config, ctx, print_config, ("prepare",))
    _stage("worldtune.data.prepare")(cfg.prepare)


@app.command(**stage_command("model", "cache"))
def cache(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Cache VAE latents per clip and text embeddings per prompt."""
    cfg = _resolve(config, ctx, print_config, ("model", "cache"))
    _stage("worldtune.data.cache")(cfg)


@app.command(**stage_command("model", "train"))
def train(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Post-train the DiT (LoRA, DoRA or full) with the rectified-flow objective."""
    from worldtune.train.preemption import PREEMPTION

    # first: a scheduler's SIGTERM/USR1 must not kill the run, not even before the trainer is imported, nor while
    # the process exits afterwards (as a program; called in-process, the caller gets its handlers back)
    with PREEMPTION.held(restore=not (ctx.obj or {}).get("program")):
        cfg = _resolve(config, ctx, print_config, ("model", "train"))
        _stage("worldtune.train.trainer")(cfg)


@app.command(**stage_command("model", "autoencoder"))
def autoencoder(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Train the model's VAE from scratch as an autoencoder on prepared clips (the first step of a seed model)."""
    cfg = _resolve(config, ctx, print_config, ("model", "autoencoder"))
    _stage("worldtune.train.autoencoder")(cfg)


@app.command()
def export(checkpoint: str = typer.Argument(..., help="checkpoint directory (or a run folder: its newest)"),
           out: str = typer.Argument(..., help="output folder"),
           fuse: bool = typer.Option(False, "--fuse", help="fuse the adapter into a full transformer folder")) -> None:
    """Export a checkpoint as diffusers files (LoRA weights or a transformer folder)."""
    _stage("worldtune.train.export")(checkpoint, out, fuse=fuse)


@app.command(**stage_command("model", "generate"))
def generate(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Generate videos from (first frame, prompt) pairs with a base model and adapters."""
    cfg = _resolve(config, ctx, print_config, ("model", "generate"))
    _stage("worldtune.infer.generate")(cfg)


@app.command(**stage_command("evaluate", "model", also=" (model: with evaluate.mode = actions only)"))
def evaluate(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Score generation folders (Sampson geometry, pixel metrics, a VLM judge), or a forward-dynamics model under
    a dataset's real actions (evaluate.mode = actions)."""
    cfg = _resolve(config, ctx, print_config, ("evaluate", "model"))
    _stage("worldtune.eval.evaluate")(cfg)


@app.command(**stage_command("report"))
def report(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Write an HTML report and a Markdown summary of evaluations and training runs."""
    cfg = _resolve(config, ctx, print_config, ("report",))
    _stage("worldtune.eval.report")(cfg.report)


@app.command(**stage_command("compare", also=" -- and those of [model], [prepare], [train], [generate], [evaluate], [report]"))
def compare(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Grid vs separate camera views: both prepared, trained, generated and scored, in one report."""
    cfg = _resolve(config, ctx, print_config, _ALL)
    _stage("worldtune.compare")(cfg)


@idm_app.command("train", **stage_command("idm"))
def idm_train(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Train an inverse-dynamics model (frames -> actions) on a LeRobot dataset, with a held-out report."""
    from worldtune.train.preemption import PREEMPTION

    with PREEMPTION.held(restore=not (ctx.obj or {}).get("program")):  # as train: a stop signal checkpoints, exits 42
        cfg = _resolve(config, ctx, print_config, ("idm",))
        _stage("worldtune.idm.train")(cfg)


@app.command(**stage_command("trajectories", "idm", "model", also=" (model: with trajectories.labeller = cosmos3 only)"))
def trajectories(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Label generated videos with an IDM and write them as a LeRobot v3.0 dataset (filtered, merged)."""
    cfg = _resolve(config, ctx, print_config, ("trajectories", "idm", "model"))
    _stage("worldtune.trajectories")(cfg)


@app.command(**stage_command("model", "serve"))
def serve(ctx: typer.Context, config: Optional[str] = _CONFIG_ARG, print_config: bool = _PRINT) -> None:
    """Serve a Cosmos 3 forward-dynamics world model to a policy over HTTP: reset with first frames, step with
    action chunks, every rollout recorded as a LeRobot episode (protocol and client: docs/serve.md)."""
    cfg = _resolve(config, ctx, print_config, ("model", "serve"))
    _stage("worldtune.serve.server")(cfg)


@app.command("serve-summary")
def serve_summary(folder: str = typer.Argument(..., help="the record folder of `worldtune serve` (serve.record)"),
                  json_out: Optional[str] = typer.Option(None, "--json", help="also write the summary as JSON here")
                  ) -> None:
    """Rank the policies whose rollouts a served world model recorded: per policy label, the judge's success
    rate (95 % Wilson interval) and mean progress (95 % bootstrap interval), skipped episodes counted."""
    _stage("worldtune.serve.ranking")(folder, json_out)


@app.command()
def demo(out: str = typer.Option("demo_out", "--out", help="run folder for every stage's output"),
         steps: Optional[int] = typer.Option(None, "--steps", help="LoRA training steps (default: 100 for a seed "
                                             "model, 200 for a tiny one)"),
         compare_views: bool = typer.Option(False, "--compare-views",
                                            help="also train and score the separate-views model beside the grid"),
         only_data: bool = typer.Option(False, "--only-data",
                                        help="only write the synthetic LeRobot dataset and the tiny model, then stop "
                                             "(the first step of configs/demo.toml)"),
         model: str = typer.Option("seed-predict2.5", "--model",
                                   help="the model to run the stages with: seed-predict2.5 (trained on the synthetic "
                                        "scene), or a tiny random one: tiny-predict2.5, tiny-cosmos3"),
         actions: Optional[bool] = typer.Option(None, "--actions/--no-actions",
                                                help="forward dynamics on the robot's actions (a Cosmos 3 model): "
                                                     "post-training, own vs another episode's actions, the videos "
                                                     "labelled back by the IDM (default: on for a seed model made "
                                                     "with actions)"),
         seed_inputs: Optional[int] = typer.Option(None, "--seed-inputs", min=0,
                                                   help="held-out inputs also generated under a second noise seed "
                                                        "(a seed model makes one per input): the report's across "
                                                        "inputs / across seeds figure (default: all of them; 0 for "
                                                        "none; fewer weigh those inputs double in the means)")) -> None:
    """Run every stage end to end on a small model: by default the seed model trained on the synthetic scene."""
    _stage("worldtune.demo")(out, steps=steps, compare_views=compare_views, only_data=only_data, model=model,
                             actions=actions, seed_inputs=seed_inputs)


@app.command(context_settings=_STAGE_CTX)
def seed(ctx: typer.Context, name: str = typer.Argument(..., help="the seed model to make, e.g. seed-predict2.5"),
         out: str = typer.Option(..., "--out", help="work folder: data, prepared clips, the runs (resumed when "
                                 "run again)"),
         ship: Optional[str] = typer.Option(None, "--ship", help="where the packed weights go (default: the "
                                            "installed package's seed folder)"),
         budget_s: Optional[float] = typer.Option(None, "--budget-s", help="seconds this call may take: a fresh "
                                                  "transformer run takes the steps that fit (a probe measures)"),
         stop_after: Optional[str] = typer.Option(None, "--stop-after", help="end after this step (data, prepare, "
                                                  "autoencoder, model, cache): e.g. the data and the VAE in one "
                                                  "call, the transformer in the next"),
         continue_shipped: bool = typer.Option(False, "--continue", help="train the shipped seed further: its VAE "
                                               "and transformer are the start, seed.json gains this run"),
         episodes: Optional[int] = typer.Option(None, "--episodes", help="scene episodes to render (default: the "
                                                "recipe's)"),
         data_seed: Optional[int] = typer.Option(None, "--data-seed", help="the episodes' random seed (default: the "
                                                 "recipe's; another seed renders new episodes of the same tasks)"),
         ) -> None:
    """Make a seed model from scratch: scene data, prepare, autoencoder, cache, full transformer training,
    packed weights; with --continue, train the shipped seed's transformer further. Extra --section.key VALUE
    arguments override the recipe's stage settings."""
    import shlex

    _stage("worldtune.seed")(name, out, overrides=list(ctx.args), ship=ship, budget_s=budget_s,
                             stop_after=stop_after, continue_shipped=continue_shipped, episodes=episodes,
                             data_seed=data_seed, command="worldtune " + shlex.join(sys.argv[1:]))


@app.command()
def doctor() -> None:
    """Check Python, torch, CUDA vs the GPU, attention backends, libraries, codecs and disk."""
    code = _stage("worldtune.doctor")()
    raise typer.Exit(code or 0)


@model_app.command("init")
def model_init(name: str = typer.Argument(..., help="registry name, e.g. tiny-predict2.5"),
               out: str = typer.Argument(..., help="output directory (diffusers format)"),
               seed: int = typer.Option(0, "--seed"),
               random_weights: bool = typer.Option(False, "--random", help="a seed model's random start instead of "
                                                   "its trained weights")) -> None:
    """Write a complete diffusers pipeline directory for a tiny spec (a seed model: its trained weights)."""
    _stage("worldtune.models.load", "init_model_dir")(name, out, seed=seed, random_weights=random_weights)


@model_app.command("info")
def model_info(name: str = typer.Argument(..., help="registry name, model directory, or hub id (org/name) in the "
                                            "local Hugging Face cache"),
               revision: Optional[str] = typer.Option(None, "--revision", help="hub revision, as model.revision"),
               frames: Optional[int] = typer.Option(None, "--frames"),
               height: Optional[int] = typer.Option(None, "--height"),
               width: Optional[int] = typer.Option(None, "--width"),
               batch: int = typer.Option(1, "--batch"),
               lora_rank: int = typer.Option(32, "--lora-rank"),
               mode: str = typer.Option("lora", "--mode", help="lora | dora | full (for --plan)"),
               plan: bool = typer.Option(False, "--plan", help="memory plan for --gpus GPUs"),
               gpus: int = typer.Option(1, "--gpus"),
               gpu_mem: float = typer.Option(141.0, "--gpu-mem", help="GB per GPU"),
               grad_checkpointing: str = typer.Option(
                   "auto", "--grad-checkpointing", help="auto | selective | all | off, as train.grad_checkpointing"),
               memory_auto: bool = typer.Option(False, "--memory-auto", help="as train.memory_auto: with auto, "
                                                "whole blocks as memory requires"),
               action_steps: int = typer.Option(0, "--action-steps", help="for --plan: action tokens per clip of a "
                                                "forward- or inverse-dynamics run (Cosmos 3; e.g. 16), 0 = none"),
               text_tokens: Optional[int] = typer.Option(None, "--text-tokens", help="for --plan: the caption's "
                                                         "length (default: the model's assumption)")) -> None:
    """Parameters, LoRA parameters, latent shape, tokens, FLOPs and memory of a model."""
    _stage("worldtune.models.info", "print_info")(
        name, frames=frames, height=height, width=width, batch=batch, lora_rank=lora_rank,
        mode=mode, plan=plan, gpus=gpus, gpu_mem=gpu_mem, grad_checkpointing=grad_checkpointing,
        memory_auto=memory_auto, revision=revision, action_steps=action_steps, text_tokens=text_tokens)


@launch_app.command("local", context_settings=_STAGE_CTX)
def launch_local(ctx: typer.Context, config: str = typer.Argument(...),
                 gpus: int = typer.Option(1, "--gpus"),
                 max_restarts: int = typer.Option(3, "--max-restarts"),
                 stage: str = typer.Option("train", "--stage", help="train, or cache (the latent cache, "
                                                                    "shared out over the G processes)")) -> None:
    """Run training (or caching) on G GPUs of this machine (torchrun), requeueing on preemption."""
    _stage("worldtune.launch.local")(config, list(ctx.args), gpus=gpus, max_restarts=max_restarts, stage=stage)


@launch_app.command("slurm", context_settings=_STAGE_CTX)
def launch_slurm(ctx: typer.Context, config: str = typer.Argument(...),
                 nodes: int = typer.Option(1, "--nodes"), gpus_per_node: int = typer.Option(8, "--gpus-per-node"),
                 partition: Optional[str] = typer.Option(None, "--partition"),
                 qos: Optional[str] = typer.Option(None, "--qos"), time: str = typer.Option("48:00:00", "--time"),
                 account: Optional[str] = typer.Option(None, "--account"),
                 max_retries: int = typer.Option(5, "--max-retries"),
                 out: str = typer.Option("slurm", "--out", help="folder for the script and logs"),
                 submit: bool = typer.Option(False, "--submit")) -> None:
    """Write (and with --submit, submit) an sbatch script with signal handling and requeue."""
    _stage("worldtune.launch.slurm")(config, list(ctx.args), nodes=nodes, gpus_per_node=gpus_per_node,
                                     partition=partition, qos=qos, time=time, account=account,
                                     max_retries=max_retries, out=out, submit=submit)


def _usage_errors() -> tuple[type[BaseException], ...]:
    """Usage errors to print without a traceback: typer raises its vendored click's exceptions
    (subclasses of `typer.TyperException`); a plain `click` one may still come from a library."""
    kinds: list[type[BaseException]] = [typer.TyperException]
    try:
        import click

        kinds.append(click.ClickException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: our errors become one line on stderr and exit code 1 (2: not built);
    usage errors print click's usage message and exit 2; nothing a user typed ends in a traceback."""
    try:
        rv = app(args=argv, standalone_mode=False, obj={"program": argv is None})  # None: this process's own argv
        if isinstance(rv, int):  # click returns typer.Exit codes instead of raising without standalone mode
            return rv
    except WorldtuneError as e:
        typer.echo(f"error: {e}", err=True)
        return getattr(e, "exit_code", 1)
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except _usage_errors() as e:
        show = getattr(e, "show", None)
        if show is not None:
            show()
        else:  # pragma: no cover
            typer.echo(f"error: {e}", err=True)
        return getattr(e, "exit_code", 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
