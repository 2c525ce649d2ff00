"""The world-model benchmark: a panel of scripted policies rolled out in the scene's simulator and, from the same
starts and seeds, in a world model served by `worldtune serve`, judged by the scene's success detector; Pearson r,
Spearman rho, MMRV, per-policy bias and prediction-powered estimates of the true success
(worldtune.serve.policy_benchmark has the method; docs/scene.md, "The world-model benchmark", how to read it).

    .venv/bin/python benchmarks/world_model_policies_bench.py --out /tmp/wmb --reduced      # CPU, 2-5 minutes
    python3 benchmarks/world_model_policies_bench.py --out /tmp/wmb_full                    # GPU: the full panel

Without --dataset it prepares one for the seed model (out/work/dataset: the recipe's room and camera layout, the
scene's actions' statistics). Writes out/results.json, out/scatter.png, out/report.md; the rollouts stay in
out/episodes (`worldtune serve-summary out/episodes` ranks them by the detector's verdicts).

A GPU machine without PyAV cannot prepare the dataset: `--prepare-only DIR` prepares it here and copies what the
server reads of it (info.json, actions.json, cameras.json: a few kB) to DIR, for --dataset DIR there
(benchmarks/world_model_policies_device.sh).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from worldtune.serve.policy_benchmark import REDUCED_PANEL, BenchmarkSettings, prepare_dataset, run

# The CPU's reduced run: four policies spread from always to never, few episodes, few denoising steps.
REDUCED = {"policies": REDUCED_PANEL, "episodes": 6, "paired": 3, "truth_episodes": 100, "steps": 8,
           "guidance": 1.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", help="a prepared scene dataset; default: prepared for --model under OUT/work")
    ap.add_argument("--model", default="seed-cosmos3")
    ap.add_argument("--model-path", help="a model folder instead of the registry's --model")
    ap.add_argument("--adapter", help="a forward-dynamics adapter (serve.adapter)")
    ap.add_argument("--reduced", action="store_true", help=f"the CPU's run: {REDUCED}")
    ap.add_argument("--policies", nargs="*", help="names from the panel (default: all, or the reduced four)")
    for name, kind in (("episodes", int), ("paired", int), ("truth-episodes", int), ("horizon", int),
                       ("chunk", int), ("steps", int), ("guidance", float)):
        ap.add_argument(f"--{name}", type=kind)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--remote", nargs="*", default=[], metavar="NAME=URL",
                    help="policies served over openpi's websocket protocol (ws://host:port), added to the panel")
    ap.add_argument("--prepare-only", metavar="DIR",
                    help="prepare the dataset, copy what the server reads of it to DIR, and stop")
    ap.add_argument("--set", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                    help="another serve setting, e.g. --set serve.fp8 true (repeatable)")
    args = ap.parse_args()
    dataset = args.dataset or str(prepare_dataset(Path(args.out) / "work", args.model))
    if args.prepare_only:
        copy_server_facts(Path(dataset), Path(args.prepare_only))
        return
    chosen = dict(REDUCED) if args.reduced else {}
    for key in ("episodes", "paired", "truth_episodes", "horizon", "chunk", "steps", "guidance"):
        if getattr(args, key) is not None:
            chosen[key] = getattr(args, key)
    if args.policies:
        chosen["policies"] = tuple(args.policies)
    settings = BenchmarkSettings(dataset=dataset, out=args.out, model=args.model, model_path=args.model_path,
                                 adapter=args.adapter, device=args.device, remote=tuple(args.remote),
                                 serve_overrides=tuple(x for key, value in args.set for x in (f"--{key}", value)),
                                 **chosen)
    t0 = time.perf_counter()
    report = run(settings)
    print((Path(args.out) / "report.md").read_text())
    print(json.dumps({"agreement": report["agreement"], "seconds": report["seconds"],
                      "total_seconds": round(time.perf_counter() - t0, 1)}, indent=1))


def copy_server_facts(dataset: Path, to: Path) -> None:
    """What the server and the benchmark read of a prepared dataset (its layout, size, prompt and action scaling),
    without the clips: small enough to carry to a machine that cannot prepare one."""
    to.mkdir(parents=True, exist_ok=True)
    for name in ("info.json", "actions.json", "cameras.json"):
        if (dataset / name).is_file():
            shutil.copy2(dataset / name, to / name)
    print(f"{to}: {sorted(p.name for p in to.iterdir())}")


if __name__ == "__main__":
    main()
