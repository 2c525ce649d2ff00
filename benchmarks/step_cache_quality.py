"""What each step cache (`generate.cache`) costs on a trained model: the seed demos' held-out videos generated again
with every cache option, base and adapter, scored as the demos score them, beside the same videos without a cache
generated in the same run.

A step cache skips transformer work on steps it judges close to one already computed, so its frames are not the
model's. On random-initialised weights that says how far frames move, not whether that costs anything a user
measures; the seed models have learned the demo's scene, so here the question can be asked:

- `predict`: the default demo (seed-predict2.5): what does each option cost in dynamic PSNR and PSNR against the
  real continuation (paired per input, 95 % bootstrap CI over inputs), and does it change the demo's answer (the
  adapter's dynamic-PSNR gain over the base)? An option whose dynamic-PSNR cost exceeds the adapter's own gain is
  flagged (`costs_more_than_the_adapter_gains`).
- `cosmos3`: the seed-cosmos3 action demo (forward dynamics under the held-out clips' own actions and another
  episode's): what each option costs in dynamic PSNR / PSNR under the own actions, and whether the action
  sensitivity (own - other actions, per clip) changes: a cache that reused steps across the action signal would
  shrink it. `evaluate.actions` has no cache option, so the cache is put on the pipeline's transformer here.
- `timing`: seconds per video of each option against no cache, runs interleaved round by round (the machine's
  other load moves all options alike), the first video of each run (warm-up) left out.

Each records the fraction of transformer calls in which the last block really computed. Needs a finished
`make demo` (default seed model) and, for `cosmos3`, `worldtune demo --model seed-cosmos3 --out DIR`. Writes,
under the demo folders, `generations_cache_<option>/`, `eval_cache_<option>/` and `timing_cache/`; the figures go
to `--json` (sections computed now replace those of an earlier run in the same file).

    .venv/bin/python benchmarks/step_cache_quality.py --demo demo_out --json benchmarks/results/step_cache_quality.json
    .venv/bin/python benchmarks/step_cache_quality.py --sections cosmos3 timing --cosmos3-demo /tmp/dc3
    .venv/bin/python benchmarks/step_cache_quality.py --options first_block:threshold=0.1 taylorseer:interval=2
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

METRICS = ("dynamic_psnr", "psnr", "ssim")
DEFAULT_OPTIONS = ("first_block:threshold=0.05", "first_block:threshold=0.1", "first_block:threshold=0.2",
                   "taylorseer:interval=2,warmup=3", "taylorseer:interval=3,warmup=2")
SECTIONS = ("predict", "cosmos3", "timing")
COSMOS3 = "seed-cosmos3"
OTHER = "+other_actions"  # the suffix of a model's videos under another episode's actions (eval/dynamics.py)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="demo_out", help="a finished default (seed-predict2.5) demo's folder")
    p.add_argument("--cosmos3-demo", default=None, help="a finished `worldtune demo --model seed-cosmos3` folder "
                   "(the cosmos3 section, and its timing)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=["predict", "timing"])
    p.add_argument("--options", nargs="+", default=list(DEFAULT_OPTIONS),
                   help="cache options as KIND:key=value,key=value (keys of [generate.cache])")
    p.add_argument("--max-inputs", type=int, default=None, help="only the first N held-out inputs")
    p.add_argument("--timing-rounds", type=int, default=2, help="interleaved rounds of the timing section")
    p.add_argument("--timing-inputs", type=int, default=2, help="held-out inputs per timing run")
    p.add_argument("--json", default="benchmarks/results/step_cache_quality.json")
    return p.parse_args(argv)


def option_overrides(option: str) -> list[str]:
    """`--generate.cache.*` overrides of one option string ("none" for no cache)."""
    if option == "none":
        return ["--generate.cache.kind", "none"]
    kind, _, params = option.partition(":")
    out = ["--generate.cache.kind", kind]
    for pair in filter(None, params.split(",")):
        key, _, value = pair.partition("=")
        out += [f"--generate.cache.{key.strip()}", value.strip()]
    return out


def slug(option: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", option).strip("_")


class ComputedSteps:
    """Counts the calls in which the transformer's last block really computed (a cache-skipped block's hook never
    calls the block's own submodules), by a hook on that block's last child, and the seconds spent in the
    transformer's calls; put on when generation sets up."""

    def __init__(self) -> None:
        self.n = 0
        self.transformer = None
        self.seconds = 0.0
        self._t0 = 0.0

    def install(self, transformer) -> None:
        from worldtune.models.speed import repeated_blocks

        if self.transformer is transformer:
            return
        self.transformer = transformer
        last_child = list(repeated_blocks(transformer)[-1].children())[-1]
        last_child.register_forward_pre_hook(lambda *_: setattr(self, "n", self.n + 1))
        transformer.register_forward_pre_hook(lambda *_: setattr(self, "_t0", time.perf_counter()))
        transformer.register_forward_hook(
            lambda *_: setattr(self, "seconds", self.seconds + time.perf_counter() - self._t0))


def generate_with(cfg, counter: ComputedSteps) -> None:
    """`worldtune generate` of `cfg`, with `counter` on the transformer once it is set up."""
    import worldtune.infer.generate as gen

    original = gen._step_cache

    def counted(transformer, g, s):
        counter.install(transformer)
        return original(transformer, g, s)

    gen._step_cache = counted
    try:
        gen.run(cfg)
    finally:
        gen._step_cache = original


def under_actions_with(cfg, counter: ComputedSteps, fn):
    """`fn(cfg)` (the actions-mode evaluation, or its generation alone) with `cfg.generate.cache` put on the pipeline's
    transformer before its first forward-dynamics video (after the adapters are injected) and `counter` on it."""
    import worldtune.infer.dynamics as dyn
    from worldtune.models.step_cache import apply_step_cache

    original = dyn.forward_dynamics

    def cached(pipe, *args, **kwargs):
        if counter.transformer is not pipe.transformer:
            counter.install(pipe.transformer)
            apply_step_cache(pipe.transformer, cfg.generate.cache, "generate.cache")
        return original(pipe, *args, **kwargs)

    dyn.forward_dynamics = cached
    try:
        return fn(cfg)
    finally:
        dyn.forward_dynamics = original


def scores(videos_jsonl: Path) -> dict[str, dict[str, dict[tuple[str, int], float]]]:
    """model -> metric -> (input, seed) -> value, from an evaluation's per-video rows (models only)."""
    out: dict[str, dict[str, dict[tuple[str, int], float]]] = {}
    for line in videos_jsonl.read_text().splitlines():
        row = json.loads(line)
        if row.get("baseline") or row.get("reference"):
            continue
        for m in METRICS:
            if row.get(m) is not None:
                out.setdefault(row["model"], {}).setdefault(m, {})[(row["name"], row["seed"])] = float(row[m])
    return out


def model_rows(gen_dir: Path) -> list[dict]:
    """The generation folder's rows of models (not baselines), in the order they were made."""
    rows = [json.loads(x) for x in (gen_dir / "generations.jsonl").read_text().splitlines()]
    return [r for r in rows if not r.get("baseline")]


def seconds_per_video(gen_dir: Path, skip_first: bool = False) -> float:
    """The median over the models' videos (`skip_first`: without the run's first video, which warms it up)."""
    times = [r["elapsed_s"] for r in model_rows(gen_dir)]
    return float(np.median(times[1:] if skip_first and len(times) > 1 else times))


def frame_change(ref: Path, other: Path) -> dict[str, Any]:
    """How far each cached video is from its uncached one: mean absolute difference ([0, 1] units) and PSNR."""
    from worldtune.data.video import read_frames
    from worldtune.eval.pixels import psnr_from_mse

    diffs, psnrs = [], []
    for row in model_rows(other):
        d = read_frames(other / row["video"]).astype(np.float64) - read_frames(ref / row["video"])
        diffs.append(float(np.abs(d).mean()) / 255)
        psnrs.append(float(psnr_from_mse((d ** 2).mean())))
    return {"videos": len(diffs), "mean_abs": round(float(np.mean(diffs)), 5),
            "psnr_db_median": round(float(np.median(psnrs)), 2), "psnr_db_min": round(float(np.min(psnrs)), 2)}


def diff(a: dict, b: dict) -> dict[str, Any]:
    """a - b, paired per (input, seed), with the input-clustered bootstrap CI of worldtune's reports."""
    from worldtune.eval.stats import paired_difference

    d = paired_difference(a, b, higher_is_better=True).to_dict()
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def minus(a: dict, b: dict) -> dict:
    """Per (input, seed): a - b, where both were scored."""
    return {k: a[k] - b[k] for k in a if k in b}


# ---------------------------------------------------------------------------------- seed-predict2.5
def predict_config(demo: Path, gen_dir: Path, eval_dir: Path, option: str, max_inputs: int | None):
    from worldtune.demo import DEFAULT_MODEL, default_steps, demo_config

    extra = ["--generate.max_inputs", str(max_inputs)] if max_inputs else []
    return demo_config(demo, default_steps(DEFAULT_MODEL), DEFAULT_MODEL, overrides=[
        "--generate.out", str(gen_dir), "--generate.baselines", "[]", *option_overrides(option), *extra,
        "--evaluate.runs", json.dumps([str(gen_dir)]), "--evaluate.out", str(eval_dir),
        "--evaluate.metrics", '["pixels"]'])


def run_option(demo: Path, option: str, max_inputs: int | None) -> dict[str, Any]:
    """Generate and evaluate the demo's held-out inputs with one option; its folders, computed steps and timing."""
    from worldtune.eval.evaluate import run as evaluate

    gen_dir, eval_dir = demo / f"generations_cache_{slug(option)}", demo / f"eval_cache_{slug(option)}"
    cfg = predict_config(demo, gen_dir, eval_dir, option, max_inputs)
    counter = ComputedSteps()
    t0 = time.perf_counter()
    generate_with(cfg, counter)
    wall = time.perf_counter() - t0
    evaluate(cfg.evaluate)
    videos = len(model_rows(gen_dir))
    calls = videos * cfg.generate.steps  # worldtune's sampler: one batch-2 call per step
    return {"option": option, "gen": gen_dir, "eval": eval_dir / "videos.jsonl", "videos": videos,
            "computed_fraction": round(counter.n / calls, 4) if counter.n else None,
            "s_per_video": round(seconds_per_video(gen_dir), 3), "generate_wall_s": round(wall, 1)}


def predict_section(demo: Path, options: list[str], max_inputs: int | None) -> dict[str, Any]:
    if not (demo / "runs" / "lora" / "export").is_dir():
        raise SystemExit(f"{demo}: no finished demo there (no runs/lora/export); run `make demo` first (or pass --demo)")
    ref = run_option(demo, "none", max_inputs)
    ref_scores = scores(ref["eval"])
    models = sorted(ref_scores)
    adapter = next(m for m in models if m != "base")
    gain = diff(ref_scores[adapter]["dynamic_psnr"], ref_scores["base"]["dynamic_psnr"])
    rows = []
    for option in options:
        got = run_option(demo, option, max_inputs)
        s = scores(got["eval"])
        cost = {m: {k: diff(s[m][k], ref_scores[m][k]) for k in METRICS} for m in models}
        worst = min(cost[m]["dynamic_psnr"]["mean"] for m in models)
        rows.append({
            "option": option, "videos": got["videos"], "computed_fraction": got["computed_fraction"],
            "s_per_video": got["s_per_video"], "speedup_vs_uncached": round(ref["s_per_video"] / got["s_per_video"], 3),
            "frames_vs_uncached": frame_change(ref["gen"], got["gen"]),
            "option_minus_uncached": cost,
            "adapter_minus_base_dynamic_psnr": diff(s[adapter]["dynamic_psnr"], s["base"]["dynamic_psnr"]),
            "costs_more_than_the_adapter_gains": bool(-worst > gain["mean"]),
        })
        print(json.dumps(rows[-1], default=str))
    return {
        "what": "the default demo's held-out videos with each generate.cache option against the same videos without "
                "a cache (same run), pixel metrics against the real continuation, paired per input",
        "uncached": {"videos": ref["videos"], "s_per_video": ref["s_per_video"],
                     "computed_fraction": ref["computed_fraction"],
                     "means": {m: {k: round(float(np.mean(list(ref_scores[m][k].values()))), 4) for k in METRICS}
                               for m in models}},
        "adapter_minus_base_dynamic_psnr_uncached": gain,
        "options": rows,
    }


# -------------------------------------------------------------------------------------- seed-cosmos3
def cosmos3_config(demo: Path, eval_dir: Path, option: str, overrides: list[str] = ()):
    """The seed-cosmos3 demo's actions-mode evaluation into `eval_dir`, pixel metrics only, no labelling back."""
    from worldtune.demo import default_steps, demo_config

    return demo_config(demo, default_steps(COSMOS3), COSMOS3, actions=True, overrides=[
        "--evaluate.out", str(eval_dir), "--evaluate.metrics", '["pixels"]', "--evaluate.actions.labellers", "[]",
        *option_overrides(option), *overrides])


def cosmos3_option(demo: Path, option: str, max_inputs: int | None) -> dict[str, Any]:
    """The actions-mode evaluation of the cosmos3 demo with one option: scores, computed steps, timing."""
    import shutil

    from worldtune.eval.evaluate import run as evaluate

    eval_dir = demo / f"eval_cache_{slug(option)}"
    shutil.rmtree(eval_dir, ignore_errors=True)  # its rows' hashes do not hold the cache: never resume another's
    cfg = cosmos3_config(demo, eval_dir, option, ["--evaluate.actions.max_inputs", str(max_inputs)] if max_inputs
                         else [])
    counter = ComputedSteps()
    under_actions_with(cfg, counter, evaluate)
    gen_dir = eval_dir / "generations"
    videos = len(model_rows(gen_dir))
    calls = videos * cfg.evaluate.actions.steps * (2 if cfg.evaluate.actions.guidance > 1 else 1)
    return {"option": option, "gen": gen_dir, "scores": scores(eval_dir / "videos.jsonl"), "videos": videos,
            "computed_fraction": round(counter.n / calls, 4) if counter.n else None,
            "s_per_video": round(seconds_per_video(gen_dir), 3)}


def sensitivity(s: dict, model: str, metric: str = "dynamic_psnr") -> dict:
    """Per clip: the model's score under its own actions minus under another episode's."""
    return minus(s[model][metric], s[model + OTHER][metric])


def cosmos3_section(demo: Path, options: list[str], max_inputs: int | None) -> dict[str, Any]:
    if not (demo / "runs" / "lora" / "export").is_dir():
        raise SystemExit(f"{demo}: no finished seed-cosmos3 demo there (no runs/lora/export); run `worldtune demo "
                         f"--model seed-cosmos3 --out {demo}` first")
    ref = cosmos3_option(demo, "none", max_inputs)
    models = sorted(m for m in ref["scores"] if not m.endswith(OTHER))
    own_metrics = ("dynamic_psnr", "psnr")
    rows = []
    for option in options:
        got = cosmos3_option(demo, option, max_inputs)
        s, r = got["scores"], ref["scores"]
        rows.append({
            "option": option, "videos": got["videos"], "computed_fraction": got["computed_fraction"],
            "s_per_video": got["s_per_video"], "frames_vs_uncached": frame_change(ref["gen"], got["gen"]),
            "option_minus_uncached": {m: {k: diff(s[m][k], r[m][k]) for k in own_metrics} for m in models},
            "action_sensitivity": {m: diff(s[m]["dynamic_psnr"], s[m + OTHER]["dynamic_psnr"]) for m in models},
            "action_sensitivity_minus_uncached": {m: diff(sensitivity(s, m), sensitivity(r, m)) for m in models},
        })
        print(json.dumps(rows[-1], default=str))
    return {
        "what": "the seed-cosmos3 action demo's held-out clips driven by their own and another episode's actions, with "
                "each cache option against no cache (same run); dynamic PSNR / PSNR against the real continuation "
                "under the own actions, action sensitivity = own - other actions (dynamic PSNR), all paired per clip",
        "uncached": {"videos": ref["videos"], "s_per_video": ref["s_per_video"],
                     "computed_fraction": ref["computed_fraction"],
                     "action_sensitivity": {m: diff(ref["scores"][m]["dynamic_psnr"],
                                                    ref["scores"][m + OTHER]["dynamic_psnr"]) for m in models},
                     "means": {m: {k: round(float(np.mean(list(ref["scores"][m][k].values()))), 4)
                                   for k in own_metrics} for m in models}},
        "options": rows,
    }


# -------------------------------------------------------------------------------------------- timing
def timed_run(family: str, demo: Path, option: str, folder: Path, inputs: int) -> dict[str, Any]:
    """One generation run of `inputs` held-out inputs with `option` into `folder` (made anew): the seconds of each
    video after the first, the transformer's seconds per video (its calls only: what a cache saves, without the
    VAE and the text encoder), and the computed-call fraction."""
    import shutil

    from worldtune.eval.dynamics import generate_under_actions

    shutil.rmtree(folder, ignore_errors=True)
    counter = ComputedSteps()
    if family == "predict":
        cfg = predict_config(demo, folder, folder / "eval", option, inputs)
        generate_with(cfg, counter)
        gen_dir, calls_per_video = folder, cfg.generate.steps
    else:
        cfg = cosmos3_config(demo, folder, option, ["--evaluate.actions.max_inputs", str(inputs),
                                                    "--evaluate.actions.other_actions", "false"])
        gen_dir = under_actions_with(cfg, counter, generate_under_actions)
        ac = cfg.evaluate.actions
        calls_per_video = ac.steps * (2 if ac.guidance > 1 else 1)
    times = [float(r["elapsed_s"]) for r in model_rows(gen_dir)]
    return {"video_s": times[1:], "transformer_s": counter.seconds / max(len(times), 1),
            "computed_fraction": round(counter.n / (len(times) * calls_per_video), 4) if times else None}


def timing_section(demos: dict[str, Path], options: list[str], rounds: int, inputs: int) -> dict[str, Any]:
    """Seconds per video, each option against no cache, the runs interleaved: round r runs every option once."""
    out: dict[str, Any] = {"rounds": rounds, "inputs_per_run": inputs,
                           "what": "per option over the interleaved rounds: median and lowest seconds per video (each "
                                   "run's first video left out) and the median over runs of the transformer's "
                                   "seconds per video; speedups = uncached / option"}
    for family, demo in demos.items():
        runs: dict[str, list[dict]] = {o: [] for o in ["none", *options]}
        for r in range(rounds):
            for option in runs:
                runs[option].append(timed_run(family, demo, option, demo / "timing_cache" / f"r{r}_{slug(option)}",
                                              inputs))

        def figures(option: str) -> tuple[float, float, float]:
            videos = [t for run in runs[option] for t in run["video_s"]]
            return (float(np.median(videos)), float(min(videos)),
                    float(np.median([run["transformer_s"] for run in runs[option]])))

        base = figures("none")
        rows = []
        for option in runs:
            got = figures(option)
            rows.append({"option": option, "videos": sum(len(run["video_s"]) for run in runs[option]),
                         "s_per_video": round(got[0], 3), "s_per_video_min": round(got[1], 3),
                         "transformer_s_per_video": round(got[2], 3),
                         "speedup_vs_uncached": round(base[0] / got[0], 3),
                         "speedup_min_vs_uncached": round(base[1] / got[1], 3),
                         "transformer_speedup_vs_uncached": round(base[2] / got[2], 3),
                         "computed_fraction": runs[option][-1]["computed_fraction"],
                         "per_round_s_per_video": [round(float(np.median(run["video_s"])), 3) for run in runs[option]]})
        out[family] = rows
        print(json.dumps({family: rows}))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    path = Path(args.json)
    result: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    cosmos3_demo = Path(args.cosmos3_demo) if args.cosmos3_demo else None
    if "cosmos3" in args.sections and cosmos3_demo is None:
        raise SystemExit("--sections cosmos3 needs --cosmos3-demo DIR (a `worldtune demo --model seed-cosmos3` folder)")
    import torch

    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread(s)"
    for section in args.sections:
        t0 = time.perf_counter()
        if section == "predict":
            got = predict_section(Path(args.demo), args.options, args.max_inputs)
        elif section == "cosmos3":
            got = cosmos3_section(cosmos3_demo, args.options, args.max_inputs)
        else:
            demos = {"predict": Path(args.demo), **({"cosmos3": cosmos3_demo} if cosmos3_demo else {})}
            got = timing_section(demos, args.options, args.timing_rounds, args.timing_inputs)
        got.update(machine=machine, wall_s=round(time.perf_counter() - t0, 1), date=time.strftime("%Y-%m-%d %H:%M %Z"))
        result[section] = got
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1, default=str))  # after each section: a later one may fail
    print(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
