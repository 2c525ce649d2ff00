"""Ranking policies by their rollouts in a served world model: `worldtune serve-summary FOLDER`.

A record folder (`serve.record`) holds one `episode_NNNNNN/` per rollout and, when the server had a judge,
its `judge.json` (`serve/judging.py`). Rollouts of several policies share a folder when each `reset` names its
policy (`Client.reset(..., policy="pi0")`); the label is in judge.json and in the episode's metadata
(`source/policy`), so an episode the judge never scored is still counted under its policy.

Per policy:

- episodes: every recorded rollout with that label; unlabelled ones form their own row.
- judged: those whose judge.json is readable and complete (both rubrics scored). The others are skipped and
  counted by why: no judge.json, an unreadable one, or a judge error (a rubric unscored, the judge unreachable).
  Skipping cannot be silent: a policy whose rollouts the judge failed on is not judged on the rest alone
  without the table saying so.
- success: the fraction of judged rollouts the judge called a success, with a 95 % Wilson score interval.
  The Wilson interval (Wilson 1927; recommended by Brown, Cai and DasGupta 2001 and Newcombe 1998) keeps its
  coverage near 95 % with the few dozen rollouts a world-model evaluation has and stays inside [0, 1] at 0 or
  all successes, where the textbook normal interval collapses to a width of zero.
- progress: the mean judged progress in [0, 1], with a 95 % percentile bootstrap interval
  (`eval/stats.cluster_bootstrap_ci`, each rollout its own cluster, fixed seed: reproducible).

The ranking orders policies by success rate, then mean progress; policies with nothing judged come last.
Intervals that overlap mean the order between those policies is not settled by these rollouts. And every
figure is the judge's view of the world model's rollouts: a proxy for the real robot, to be checked against
real rollouts before it decides anything.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from worldtune.errors import DatasetError
from worldtune.eval.stats import CI_LEVEL, cluster_bootstrap_ci
from worldtune.serve.judging import FILE, FORMAT
from worldtune.serve.recorder import EPISODE_NAME

UNLABELLED = "(unlabelled)"  # the row of rollouts reset without a policy label
SKIPS = ("no_judge", "unreadable", "judge_error")  # why an episode is not judged, in the table's order
_SKIP_WORDS = {"no_judge": "no judge.json", "unreadable": "unreadable", "judge_error": "judge error"}


@dataclass
class PolicySummary:
    """One policy's rollouts and what the judge made of them (see the module doc)."""

    policy: str
    episodes: int = 0
    judged: int = 0
    successes: int = 0
    success_rate: float | None = None
    success_ci: tuple[float, float] | None = None
    progress: float | None = None
    progress_ci: tuple[float, float] | None = None
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIPS, 0))
    rank: int | None = None  # 1 = best; None: nothing judged


@dataclass
class Summary:
    folder: str
    episodes: int
    skipped: dict[str, int]
    policies: list[PolicySummary]  # in ranking order

    def to_json(self) -> dict[str, Any]:
        return {"format": "worldtune.serve.summary", "version": 1, "folder": self.folder, "episodes": self.episodes,
                "skipped": self.skipped, "ci_level": CI_LEVEL, "policies": [asdict(p) for p in self.policies]}


def wilson_interval(successes: int, n: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion successes / n (n > 0)."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: {successes} successes of {n} trials")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(folder: str | Path) -> Summary:
    """Read every episode's judge.json under `folder`, group by policy, rank (one-line error: no recordings)."""
    root = Path(folder)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder; give the record folder `worldtune serve` wrote (serve.record)")
    episodes = sorted(p for p in root.iterdir() if p.is_dir() and EPISODE_NAME.match(p.name))
    if not episodes:
        raise DatasetError(f"{root}: no recorded episodes (episode_NNNNNN folders) there; give the folder "
                           "serve.record named, after rollouts have ended")
    rows: dict[str, PolicySummary] = {}
    outcomes: dict[str, list[tuple[bool, float]]] = defaultdict(list)
    for ep in episodes:
        policy, verdict, why = read_episode(ep)
        row = rows.setdefault(policy, PolicySummary(policy))
        row.episodes += 1
        if verdict is None:
            row.skipped[why] += 1
        else:
            outcomes[policy].append(verdict)
    for policy, row in rows.items():
        _score(row, outcomes[policy])
    ranked = sorted(rows.values(), key=_order)
    for i, row in enumerate(r for r in ranked if r.judged):
        row.rank = i + 1
    skipped = {k: sum(r.skipped[k] for r in ranked) for k in SKIPS}
    return Summary(str(root), len(episodes), skipped, ranked)


def read_episode(episode: Path) -> tuple[str, tuple[bool, float] | None, str]:
    """(policy, (success, progress) or None, why skipped) of one recorded episode."""
    path = episode / FILE
    if not path.is_file():
        return _metadata_policy(episode), None, "no_judge"
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(verdict, dict) or verdict.get("format") != FORMAT:
            raise ValueError("not a worldtune.serve.judge verdict")
    except (OSError, ValueError, UnicodeDecodeError):
        return _metadata_policy(episode), None, "unreadable"
    label = verdict.get("policy")
    policy = label if isinstance(label, str) and label else _metadata_policy(episode)
    success, progress = verdict.get("success"), verdict.get("progress")
    if verdict.get("errors") or verdict.get("error") or not isinstance(success, bool) \
            or not isinstance(progress, (int, float)) or not math.isfinite(progress):
        return policy, None, "judge_error"
    return policy, (success, float(progress)), ""


def _metadata_policy(episode: Path) -> str:
    """The label the recorder wrote in the episode's metadata (`source/policy`); UNLABELLED when none."""
    from worldtune.data.lerobot_writer import EPISODES_PATH

    try:
        import pyarrow.parquet as pq

        table = pq.read_table(episode / EPISODES_PATH)
        if "source/policy" in table.column_names:
            value = table.column("source/policy")[0].as_py()
            if isinstance(value, str) and value:
                return value
    except Exception:  # noqa: BLE001 - a damaged metadata file leaves the episode unlabelled, still counted
        pass
    return UNLABELLED


def _score(row: PolicySummary, outcomes: list[tuple[bool, float]]) -> None:
    row.judged = len(outcomes)
    if not outcomes:
        return
    row.successes = sum(s for s, _ in outcomes)
    row.success_rate = row.successes / row.judged
    row.success_ci = wilson_interval(row.successes, row.judged)
    progress = [p for _, p in outcomes]
    row.progress = sum(progress) / len(progress)
    if len(progress) >= 2:  # one rollout has no spread to resample
        row.progress_ci = cluster_bootstrap_ci([[p] for p in progress])


def _order(row: PolicySummary) -> tuple:
    if not row.judged:
        return (1, 0.0, 0.0, row.policy)
    return (0, -(row.success_rate or 0.0), -(row.progress or 0.0), row.policy)


# ---------------------------------------------------------------------------------------- the command
def run(folder: str, json_out: str | None = None) -> Summary:
    """`worldtune serve-summary`: print the ranking table; with `json_out`, write it as JSON too."""
    from rich.console import Console
    from rich.table import Table

    summary = summarize(folder)
    table = Table(title=f"worldtune serve-summary: {summary.folder} ({summary.episodes} episodes)")
    for col in ("rank", "policy", "episodes", "judged", "success", "95 % CI", "progress", "95 % CI", "skipped"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in summary.policies:
        skipped = ", ".join(f"{n} {_SKIP_WORDS[k]}" for k, n in r.skipped.items() if n) or "-"
        table.add_row(str(r.rank or "-"), r.policy, str(r.episodes), str(r.judged),
                      _pct(r.success_rate) + (f" ({r.successes}/{r.judged})" if r.judged else ""), _ci(r.success_ci, 100, " %"),
                      _num(r.progress), _ci(r.progress_ci), skipped)
    console = Console()
    console.print(table)
    s = summary.skipped
    if any(s.values()):
        console.print(f"not judged: {s['no_judge']} without judge.json, {s['unreadable']} with an unreadable one, "
                      f"{s['judge_error']} with a judge error")
    console.print("success and progress are the judge's view of world-model rollouts: check the ranking against "
                  "real rollouts")
    if json_out:
        from worldtune.atomic import atomic_write_json

        atomic_write_json(json_out, summary.to_json())
        console.print(f"written: {json_out}")
    return summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ci(ci: tuple[float, float] | None, scale: float = 1.0, unit: str = "") -> str:
    if ci is None:
        return "-"
    digits = 0 if scale == 100 else 2
    return f"{scale * ci[0]:.{digits}f}-{scale * ci[1]:.{digits}f}{unit}"
