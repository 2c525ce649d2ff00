"""Does a Cosmos 3 model use its actions for forward dynamics? The held-out flow loss under own vs other actions.

Generated videos answer slowly and through the VAE and the sampler; the training objective answers directly. On
the demo's held-out clips (`worldtune demo --model seed-cosmos3 --out DIR` made them, with their latent cache),
each clip's forward-dynamics flow-matching loss at fixed noise levels and fixed noise is computed with its own
action chunk and with another clip's (the next one, cyclically), with the caption kept and with it dropped (what
guidance's unconditional branch sees: then only the first frame and the actions say where the arm goes). A model
that reads its actions scores lower with its own; the paired difference (other - own) comes with the clip-level
95 % bootstrap interval of worldtune's reports.

    .venv/bin/python benchmarks/seed_action_use.py --demo /tmp/dc3

Writes benchmarks/results/seed_action_use.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

SIGMAS = (0.3, 0.6, 0.9)


def losses(demo: Path, model: str) -> dict[str, dict[str, list[float]]]:
    """{"text"|"no_text": {"own"|"other": [loss per clip]}}, averaged over SIGMAS."""
    from worldtune.demo import demo_config
    from worldtune.train.trainer import Trainer

    cfg = demo_config(demo, 1, model, actions=True)
    train = cfg.train.model_copy(update={"out": str(demo / "runs" / "action_use"), "resume": None,
                                         "task": "forward_dynamics"})
    trainer = Trainer(cfg.model_copy(update={"train": train}))
    data = trainer.val_set if len(trainer.val_set) else trainer.train_set
    items = [trainer._item(data, i) for i in range(len(data))]
    out: dict[str, dict[str, list[float]]] = {}
    with torch.no_grad():
        for caption in ("text", "no_text"):
            own, other = [], []
            for i, item in enumerate(items):
                x0, text, actions = trainer._inputs([item])
                _, _, foreign = trainer._inputs([items[(i + 1) % len(items)]])
                if caption == "no_text":
                    text = text[:, [1, 1]]  # both rows the dropped caption
                for acts, bucket in ((actions, own), (foreign, other)):
                    bucket.append(sum(float(trainer._forward_loss(
                        x0, text, [1000 + i], model=trainer.transformer, actions=acts, modes=["forward_dynamics"],
                        sigma=[s], num_cond=[1])) for s in SIGMAS) / len(SIGMAS))
            out[caption] = {"own": own, "other": other}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a `worldtune demo --model seed-cosmos3` folder")
    ap.add_argument("--model", default="seed-cosmos3")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/seed_action_use.json"))
    a = ap.parse_args()
    from worldtune.eval.stats import paired_difference

    t0 = time.time()
    result = {"model": a.model, "demo": str(a.demo), "sigmas": SIGMAS, "machine": platform.node(),
              "processor": platform.processor() or platform.machine(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d")}
    for caption, d in losses(a.demo, a.model).items():
        own = {(i, 0): v for i, v in enumerate(d["own"])}
        other = {(i, 0): v for i, v in enumerate(d["other"])}
        diff = paired_difference(other, own, higher_is_better=True)  # other - own: > 0 when actions are read
        mean_own = sum(d["own"]) / len(d["own"])
        result[caption] = {"own_loss": mean_own, "other_loss": sum(d["other"]) / len(d["other"]),
                           "other_minus_own": diff.to_dict(), "relative": diff.mean / mean_own}
        print(f"{caption:8s} own {mean_own:.4f}  other - own {diff.mean:+.5f} "
              f"[{diff.ci_low:+.5f}, {diff.ci_high:+.5f}]  ({100 * diff.mean / mean_own:+.2f} %, n={diff.n_inputs})")
    result["seconds"] = round(time.time() - t0, 1)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
