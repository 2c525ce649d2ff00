"""The scene's simulator: the scripted policies' true success rates, and the success detector against them.

Every policy of the panel (worldtune.scene.policies) runs --episodes episodes in the simulator
(worldtune.scene.sim), episode `seed` laid out as the scene's dataset episode of that index, with a task drawn
from the seed (any block, into the bowl or onto another block; the same task for every policy at one seed, so
the policies are compared on paired episodes). Per policy: the true success rate (the simulator's predicate on
the final state) with its 95 % Wilson interval. Then the success detector (worldtune.scene.detector) judges the
final frame of the two exterior views, rendered at the dataset's size: its agreement with the predicate over
all rollouts, with a Wilson interval, its confusion counts, and the success rates it would report per policy.
The detector's rules and thresholds were set looking at seeds 0-99 and 1000-1049; the figures are taken on
seeds --first-seed onwards (10000), never looked at while making it.
Rollouts draw nothing until the last step (the policies read the state), so the run is cheap on the CPU.

    .venv/bin/python benchmarks/scene_policies_bench.py --episodes 100 --json benchmarks/results/scene_policies.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from worldtune.scene.detector import SuccessDetector
from worldtune.scene.policies import panel, rollout
from worldtune.scene.sim import SceneEnv
from worldtune.scene.task import SceneTask
from worldtune.serve.ranking import wilson_interval

VIEWS = ("exterior_1_left", "exterior_2_left")


def task_of(seed: int) -> SceneTask:
    """The task of episode `seed`: the same for every policy."""
    return SceneTask.draw(np.random.default_rng([seed, 99]))


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (ties get their average rank)."""
    def ranks(x: list[float]) -> np.ndarray:
        x = np.asarray(x, float)
        r = np.empty(len(x))
        for v in np.unique(x):
            r[x == v] = np.flatnonzero(np.sort(x) == v).mean()
        return r
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def run(episodes: int, first_seed: int = 10000, height: int = 96, width: int = 160, style: str = "demo",
        max_steps: int = 30) -> dict[str, Any]:
    """Roll the panel out, judge every final frame, and gather the figures."""
    env = SceneEnv(cameras=(), height=height, width=width, max_steps=max_steps, style=style)
    seeds = range(first_seed, first_seed + episodes)
    policies: dict[str, Any] = {}
    seconds = {"rollout": 0.0, "render": 0.0, "detect": 0.0}
    agree = unknown = 0
    confusion = {"true_pos": 0, "false_pos": 0, "true_neg": 0, "false_neg": 0, "unknown": 0}
    for policy in panel():
        wins = called = 0
        for seed in seeds:
            t0 = time.perf_counter()
            r = rollout(env, policy, task_of(seed), seed)
            t1 = time.perf_counter()
            views = env.render_views(VIEWS)
            t2 = time.perf_counter()
            verdict = SuccessDetector(r.cameras)(views, r.task)
            t3 = time.perf_counter()
            seconds["rollout"] += t1 - t0
            seconds["render"] += t2 - t1
            seconds["detect"] += t3 - t2
            wins += r.success
            called += bool(verdict.success)
            agree += verdict.success == r.success
            key = ("unknown" if verdict.success is None else
                   f"{'true' if verdict.success == r.success else 'false'}_{'pos' if verdict.success else 'neg'}")
            confusion[key] += 1
            unknown += verdict.success is None
        lo, hi = wilson_interval(wins, episodes)
        dlo, dhi = wilson_interval(called, episodes)
        policies[policy.name] = {"episodes": episodes, "successes": wins, "success_rate": wins / episodes,
                                 "ci95": [round(lo, 3), round(hi, 3)], "detector_rate": called / episodes,
                                 "detector_ci95": [round(dlo, 3), round(dhi, 3)]}
    n = episodes * len(policies)
    alo, ahi = wilson_interval(agree, n)
    rates = [p["success_rate"] for p in policies.values()]
    called_rates = [p["detector_rate"] for p in policies.values()]
    return {"episodes_per_policy": episodes, "seeds": [first_seed, first_seed + episodes - 1],
            "frame_size": [height, width], "style": style, "max_steps": max_steps, "policies": policies,
            "spread": round(max(rates) - min(rates), 3),
            "detector": {"rollouts": n, "agree": agree, "accuracy": round(agree / n, 4),
                         "ci95": [round(alo, 4), round(ahi, 4)], "confusion": confusion, "views": list(VIEWS),
                         "spearman_rates": round(spearman(rates, called_rates), 4),
                         "max_rate_error": round(max(abs(a - b) for a, b in zip(rates, called_rates)), 3)},
            "seconds": {k: round(v, 2) for k, v in seconds.items()},
            "ms_per_rollout": {k: round(1000 * v / n, 2) for k, v in seconds.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100, help="episodes per policy")
    ap.add_argument("--first-seed", type=int, default=10000)
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--style", choices=("demo", "hard"), default="demo")
    ap.add_argument("--json", type=str, default=None, help="write the figures here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = run(args.episodes, args.first_seed, args.height, args.width, args.style)
    out.update({"wall_seconds": round(time.perf_counter() - t0, 1),
                "machine": f"{platform.machine()}, {cv2.getNumberOfCPUs()} CPUs (shared)",
                "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
