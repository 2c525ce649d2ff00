"""The forward-dynamics overfit check (worldtune.eval.action_overfit) at any size: can the model learn to read its
actions on a few clips that differ only in the arm's path?

    .venv/bin/python benchmarks/action_overfit.py --model seed-cosmos3 --steps 300 --score-every 100
    python3 benchmarks/action_overfit.py --model seed-cosmos3 --steps 2000 --score-every 250 --json OUT.json  (GPU)

Prints the separation (loss under the other clips' chunks / under the clip's own) at each scoring step and from start to
end, and writes them, with the training loss and the time, to benchmarks/results/action_overfit.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from worldtune.eval.action_overfit import overfit_check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="seed-cosmos3", help="a Cosmos 3 registry name (seed-cosmos3, tiny-cosmos3)")
    ap.add_argument("--paths", type=int, default=4, help="episodes of one layout and start, one clip each")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--score-every", type=int, default=0, help="score the separation every N steps (0: at the end)")
    ap.add_argument("--fresh-transformer", action="store_true",
                    help="the model's trained VAE under a randomly initialised transformer")
    ap.add_argument("--transformer", type=json.loads, default=None,
                    help='with --fresh-transformer: its config changes, as JSON (e.g. \'{"latent_patch_size": 1}\')')
    ap.add_argument("--work", type=Path, default=None, help="folder for the clips and the run (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "action_overfit.json")
    args, overrides = ap.parse_known_args()  # the rest: --section.key VALUE settings of the run
    work = args.work or Path(tempfile.mkdtemp(prefix="action_overfit_"))
    check = overfit_check(work, args.model, args.paths, args.steps, args.score_every, overrides,
                          args.fresh_transformer, args.transformer)
    print(f"{args.model}: separation {check.before.ratio:.4f} -> {check.after.ratio:.4f} (worst clip "
          f"{check.after.min_clip_ratio:.4f}), learned share {check.before.learned_share:.4f} -> "
          f"{check.after.learned_share:.4f} in {check.steps} steps, {check.seconds:.0f} s")
    row = {**check.row(), "fresh_transformer": args.fresh_transformer, "transformer": args.transformer, "overrides": overrides,
           "machine": platform.node(), "processor": platform.processor(),
           "date": time.strftime("%Y-%m-%d")}
    try:
        import torch

        if torch.cuda.is_available():
            row["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
