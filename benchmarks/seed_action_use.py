"""Does a Cosmos 3 model use its actions for forward dynamics? The held-out flow loss under own vs other actions.

Generated videos answer slowly and through the VAE and the sampler; the training objective answers directly. On
the demo's held-out clips (`worldtune demo --model seed-cosmos3 --out DIR` made them, with their latent cache),
each clip's forward-dynamics flow-matching loss at fixed noise levels and fixed noise is computed with its own
action chunk, with another clip's (the next one, cyclically) and with all-zero actions (every step at the middle
of the normalised range: actions that say nothing), with the caption kept and with it dropped (what guidance's
unconditional branch sees: then only the first frame and the actions say where the arm goes). A model that reads
its actions scores lower with its own; the paired differences (other - own, zeros - own) come with the
clip-level 95 % bootstrap interval of worldtune's reports.

`--finetune TASK --steps N` first trains the whole generator (train.mode = full) for N steps of TASK
(forward_dynamics or joint) on the demo's training clips, then measures that model: whether a training mix
teaches the model to read its actions, in minutes on a CPU.

    .venv/bin/python benchmarks/seed_action_use.py --demo /tmp/dc3
    .venv/bin/python benchmarks/seed_action_use.py --demo /tmp/dc3 --finetune forward_dynamics --steps 400
    .venv/bin/python benchmarks/seed_action_use.py --demo /tmp/dc3 --model-path WORK/packed --json out.json

Writes benchmarks/results/seed_action_use.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from worldtune.eval.action_use import SIGMAS, forward_dynamics_losses, trainer_for


def finetune(demo: Path, model: str, task: str, steps: int) -> Path:
    """A model folder: the demo's model with its transformer trained `steps` full steps of `task` (kept: a second
    call measures it again without training; delete DEMO/model_TASK to train anew)."""
    import shutil

    folder = demo / f"model_{task}"
    if (folder / "transformer").is_dir():
        return folder
    run = demo / "runs" / f"action_use_{task}"
    shutil.rmtree(run, ignore_errors=True)
    trainer_for(demo, model, run, task, steps, mode="full").fit()
    shutil.copytree(demo / "model", folder, ignore=shutil.ignore_patterns("transformer"))
    shutil.copytree(run / "export" / "transformer", folder / "transformer")
    return folder


def losses(demo: Path, model: str, model_path: Path | None = None) -> dict[str, dict[str, list[float]]]:
    """{"text"|"no_text": {"own"|"other"|"zeros": [loss per clip]}}, averaged over SIGMAS."""
    trainer = trainer_for(demo, model, demo / "runs" / "action_use", model_path=model_path)
    return {caption: forward_dynamics_losses(trainer, drop_text=caption == "no_text") for caption in ("text", "no_text")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a `worldtune demo --model seed-cosmos3` folder")
    ap.add_argument("--model", default="seed-cosmos3")
    ap.add_argument("--finetune", choices=("forward_dynamics", "joint"), default=None,
                    help="first train the whole generator on the demo's training clips with this task")
    ap.add_argument("--steps", type=int, default=400, help="steps of --finetune (batch 8)")
    ap.add_argument("--model-path", type=Path, default=None,
                    help="measure this model folder (a seed run's `packed` folder) instead of the demo's model")
    ap.add_argument("--json", type=Path, default=None, help="default: benchmarks/results/seed_action_use[_TASK].json")
    a = ap.parse_args()
    from worldtune.eval.stats import paired_difference

    t0 = time.time()
    result = {"model": a.model, "demo": str(a.demo), "sigmas": SIGMAS, "machine": platform.node(),
              "processor": platform.processor() or platform.machine(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "finetune": a.finetune and {"task": a.finetune, "steps": a.steps}}
    model_path = finetune(a.demo, a.model, a.finetune, a.steps) if a.finetune else a.model_path
    result["model_path"] = model_path and str(model_path)
    for caption, d in losses(a.demo, a.model, model_path).items():
        mean_own = sum(d["own"]) / len(d["own"])
        result[caption] = {"own_loss": mean_own}
        for name in ("other", "zeros"):
            diff = paired_difference({(i, 0): v for i, v in enumerate(d[name])},
                                     {(i, 0): v for i, v in enumerate(d["own"])}, higher_is_better=True)
            result[caption].update({f"{name}_loss": sum(d[name]) / len(d[name]), f"{name}_minus_own": diff.to_dict(),
                                    f"{name}_relative": diff.mean / mean_own})  # > 0: its own actions help
            print(f"{caption:8s} own {mean_own:.4f}  {name} - own {diff.mean:+.5f} [{diff.ci_low:+.5f}, "
                  f"{diff.ci_high:+.5f}]  ({100 * diff.mean / mean_own:+.2f} %, n={diff.n_inputs})")
    result["seconds"] = round(time.time() - t0, 1)
    path = a.json or Path(f"benchmarks/results/seed_action_use{'_' + a.finetune if a.finetune else ''}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
