"""What each step cache (`generate.cache`) costs on a trained model: the default demo's held-out videos generated
again with every cache option by the seed model, base and LoRA, scored as the demo scores them, beside the same
videos without a cache generated in the same run.

A step cache skips transformer work on steps it judges close to one already computed, so its frames are not the
model's. On random-initialised weights that says how far frames move, not whether that costs anything a user
measures; the seed model has learned the demo's scene, so here the question can be asked: what does each option
cost in dynamic PSNR and PSNR against the real continuation (paired per input, 95 % bootstrap CI over inputs),
does it change the demo's answer (the adapter's dynamic-PSNR gain over the base), and how much of the transformer's
work does it skip (the fraction of steps on which the last block computed) for how much wall time on this machine.
An option whose dynamic-PSNR cost exceeds the adapter's own gain is flagged (`costs_more_than_the_adapter_gains`).

Needs a finished `make demo` (its `demo_out`, made with the default seed model). Writes, under the demo folder,
`generations_cache_<option>/` and `eval_cache_<option>/` (`none`: the uncached rerun), and the figures to `--json`.

    .venv/bin/python benchmarks/step_cache_quality.py --demo demo_out --json benchmarks/results/step_cache_quality.json
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


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="demo_out", help="a finished default demo's folder")
    p.add_argument("--options", nargs="+", default=list(DEFAULT_OPTIONS),
                   help="cache options as KIND:key=value,key=value (keys of [generate.cache])")
    p.add_argument("--max-inputs", type=int, default=None, help="only the first N held-out inputs")
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
    calls the block's own submodules), by a hook on that block's last child, put on when generation sets up."""

    def __init__(self) -> None:
        self.n = 0

    def install(self, transformer) -> None:
        from worldtune.models.speed import repeated_blocks

        last_child = list(repeated_blocks(transformer)[-1].children())[-1]
        last_child.register_forward_pre_hook(lambda *_: setattr(self, "n", self.n + 1))


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


def seconds_per_video(gen_dir: Path) -> float:
    """The median over the models' videos (the first video of a run also warms the process up)."""
    rows = [json.loads(x) for x in (gen_dir / "generations.jsonl").read_text().splitlines()]
    times = [r["elapsed_s"] for r in rows if not r.get("baseline")]
    return float(np.median(times))


def frame_change(ref: Path, other: Path) -> dict[str, Any]:
    """How far each cached video is from its uncached one: mean absolute difference ([0, 1] units) and PSNR."""
    from worldtune.data.video import read_frames
    from worldtune.eval.pixels import psnr_from_mse

    diffs, psnrs = [], []
    for row in (json.loads(x) for x in (other / "generations.jsonl").read_text().splitlines()):
        if row.get("baseline"):
            continue
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


def run_option(demo: Path, option: str, max_inputs: int | None) -> dict[str, Any]:
    """Generate and evaluate the demo's held-out inputs with one option; its folders, computed steps and timing."""
    from worldtune.demo import DEFAULT_MODEL, default_steps, demo_config
    from worldtune.eval.evaluate import run as evaluate

    gen_dir, eval_dir = demo / f"generations_cache_{slug(option)}", demo / f"eval_cache_{slug(option)}"
    extra = ["--generate.max_inputs", str(max_inputs)] if max_inputs else []
    cfg = demo_config(demo, default_steps(DEFAULT_MODEL), DEFAULT_MODEL, overrides=[
        "--generate.out", str(gen_dir), "--generate.baselines", "[]", *option_overrides(option), *extra,
        "--evaluate.runs", json.dumps([str(gen_dir)]), "--evaluate.out", str(eval_dir),
        "--evaluate.metrics", '["pixels"]'])
    counter = ComputedSteps()
    t0 = time.perf_counter()
    generate_with(cfg, counter)
    wall = time.perf_counter() - t0
    evaluate(cfg.evaluate)
    videos = sum(1 for x in (gen_dir / "generations.jsonl").read_text().splitlines() if not json.loads(x)["baseline"])
    calls = videos * cfg.generate.steps  # worldtune's sampler: one batch-2 call per step
    return {"option": option, "gen": gen_dir, "eval": eval_dir / "videos.jsonl", "videos": videos,
            "computed_fraction": round(counter.n / calls, 4) if counter.n else None,
            "s_per_video": round(seconds_per_video(gen_dir), 3), "generate_wall_s": round(wall, 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    demo = Path(args.demo)
    if not (demo / "runs" / "lora" / "export").is_dir():
        raise SystemExit(f"{demo}: no finished demo there (no runs/lora/export); run `make demo` first (or pass --demo)")
    t0 = time.perf_counter()
    ref = run_option(demo, "none", args.max_inputs)
    ref_scores = scores(ref["eval"])
    models = sorted(ref_scores)
    adapter = next(m for m in models if m != "base")
    gain = diff(ref_scores[adapter]["dynamic_psnr"], ref_scores["base"]["dynamic_psnr"])
    rows = []
    for option in args.options:
        got = run_option(demo, option, args.max_inputs)
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
    result = {
        "what": "the default demo's held-out videos with each generate.cache option against the same videos without "
                "a cache (same run), pixel metrics against the real continuation, paired per input",
        "uncached": {"videos": ref["videos"], "s_per_video": ref["s_per_video"],
                     "computed_fraction": ref["computed_fraction"],
                     "means": {m: {k: round(float(np.mean(list(ref_scores[m][k].values()))), 4) for k in METRICS}
                               for m in models}},
        "adapter_minus_base_dynamic_psnr_uncached": gain,
        "options": rows,
        "machine": f"{platform.processor() or platform.machine()}, torch threads {__import__('torch').get_num_threads()}",
        "wall_s": round(time.perf_counter() - t0, 1), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
