"""FP8's quality figure on a trained model: the default demo's videos generated again with `generate.fp8`, scored as
the demo scores them, beside the bf16 (on the CPU: fp32) ones.

Random-initialised real-size models (what the GPU speed figures use) say how far FP8 moves the frames, not whether
that costs anything a user measures. The seed model has learned the demo's scene, so here the question can be asked:
does FP8 change the pixel metrics against the real continuation, and does it change the demo's answer (the adapter's
dynamic-PSNR gain over the base, with its confidence interval)?

`generate.fp8` runs through torchao, which needs a CUDA GPU of compute capability 8.9 or later: run this where the
demo ran on such a GPU, so that both sets of videos come from one device. Needs a finished `make demo` (its
`demo_out`, made with the default seed model). Writes, under the demo folder, `generations_fp8/` and `eval_fp8/`, and
the figures to `--json`:
- per model (base, the adapter): the FP8 frames against the full-precision ones (mean absolute difference in
  [0, 1] units, PSNR), and per pixel metric the paired difference FP8 - full precision with its bootstrap CI;
- the adapter - base difference of every pixel metric under both, as the demo's report computes it.

    .venv/bin/python benchmarks/fp8_quality.py --demo demo_out --json benchmarks/results/fp8_quality.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

METRICS = ("dynamic_psnr", "psnr", "ssim", "warp_error")
LOWER_IS_BETTER = {"warp_error"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="demo_out", help="a finished default demo's folder")
    p.add_argument("--json", default="benchmarks/results/fp8_quality.json")
    return p.parse_args(argv)


def scores(videos_jsonl: Path) -> dict[str, dict[str, dict[tuple[str, int], float]]]:
    """model -> metric -> (input, seed) -> value, from an evaluation's per-video rows."""
    out: dict[str, dict[str, dict[tuple[str, int], float]]] = {}
    for line in videos_jsonl.read_text().splitlines():
        row = json.loads(line)
        if row.get("baseline") or row.get("reference"):
            continue
        for m in METRICS:
            if row.get(m) is not None:
                out.setdefault(row["model"], {}).setdefault(m, {})[(row["name"], row["seed"])] = float(row[m])
    return out


def frame_change(full: Path, low: Path) -> dict[str, Any]:
    """How far each FP8 video is from its full-precision one: mean absolute difference ([0, 1] units) and PSNR."""
    from worldtune.data.video import read_frames
    from worldtune.eval.pixels import psnr_from_mse

    diffs, psnrs = [], []
    for row in (json.loads(x) for x in (low / "generations.jsonl").read_text().splitlines()):
        if row.get("baseline"):
            continue
        d = read_frames(low / row["video"]).astype(np.float64) - read_frames(full / row["video"])
        diffs.append(float(np.abs(d).mean()) / 255)
        psnrs.append(float(psnr_from_mse((d ** 2).mean())))
    return {"videos": len(diffs), "mean_abs": round(float(np.mean(diffs)), 5),
            "psnr_db_median": round(float(np.median(psnrs)), 2), "psnr_db_min": round(float(np.min(psnrs)), 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    from worldtune.demo import DEFAULT_MODEL, default_steps, demo_config
    from worldtune.eval.evaluate import run as evaluate
    from worldtune.eval.stats import paired_difference
    from worldtune.infer.generate import run as generate

    demo = Path(args.demo)
    full_eval = demo / "eval" / "videos.jsonl"
    if not full_eval.is_file():
        raise SystemExit(f"{full_eval}: no evaluation of a finished demo there; run `make demo` first (or pass --demo)")
    low_gen, low_eval = demo / "generations_fp8", demo / "eval_fp8"
    cfg = demo_config(demo, default_steps(DEFAULT_MODEL), DEFAULT_MODEL, overrides=[
        "--generate.out", str(low_gen), "--generate.fp8", "true", "--generate.baselines", "[]",
        "--evaluate.runs", json.dumps([str(low_gen)]), "--evaluate.out", str(low_eval),
        "--evaluate.metrics", '["pixels"]'])
    t0 = time.perf_counter()
    generate(cfg)
    evaluate(cfg.evaluate)
    full, low = scores(full_eval), scores(low_eval / "videos.jsonl")
    models = sorted(set(full) & set(low))
    adapter = next(m for m in models if m != "base")

    def diff(a: dict, b: dict, metric: str) -> dict[str, Any]:
        d = paired_difference(a[metric], b[metric], higher_is_better=metric not in LOWER_IS_BETTER).to_dict()
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}

    result = {
        "what": "the default demo's held-out videos with generate.fp8 against its full-precision videos, pixel "
                "metrics against the real continuation",
        "frames": frame_change(demo / "generations", low_gen),
        "fp8_minus_full": {m: {k: diff(low[m], full[m], k) for k in METRICS} for m in models},
        "adapter_minus_base": {"full": {k: diff(full[adapter], full["base"], k) for k in METRICS},
                               "fp8": {k: diff(low[adapter], low["base"], k) for k in METRICS}},
        "means": {m: {k: {"full": round(float(np.mean(list(full[m][k].values()))), 4),
                          "fp8": round(float(np.mean(list(low[m][k].values()))), 4)} for k in METRICS}
                  for m in models},
        "wall_s": round(time.perf_counter() - t0, 1), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
