"""`worldtune serve-summary`: the Wilson interval against published values, and grouping, ranking and skip counts
over a record folder written by hand in the recorder's layout (episode folders with judge.json; no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worldtune.cli import main
from worldtune.errors import DatasetError
from worldtune.serve.ranking import UNLABELLED, summarize, wilson_interval


@pytest.mark.parametrize("k, n, low, high", [  # Newcombe (1998), Statistics in Medicine 17, table I, method 3
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_interval_matches_published_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_wilson_interval_is_symmetric_and_refuses_nonsense():
    lo, hi = wilson_interval(3, 10)
    assert (1 - hi, 1 - lo) == pytest.approx(wilson_interval(7, 10))
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(10, 10)[0] < 1.0  # not collapsed at all-success
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def _episode(root: Path, i: int, policy: str | None, success: bool | None = None, progress: float | None = None,
             judge: str = "ok") -> Path:
    """One episode folder as the recorder and the judge leave it: its episode metadata (the label, read when the
    judge.json is missing or unreadable) and judge.json; videos and frames are not read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from worldtune.data.lerobot_writer import EPISODES_PATH

    ep = root / f"episode_{i:06d}"
    (ep / EPISODES_PATH).parent.mkdir(parents=True)
    labels = {"source/policy": [policy]} if policy is not None else {}  # the recorder writes no column unlabelled
    pq.write_table(pa.table({"episode_index": [0], "tasks": [["stack"]], "length": [9], **labels}), ep / EPISODES_PATH)
    if judge == "none":
        return ep
    if judge == "garbage":
        (ep / "judge.json").write_text("{not json")
        return ep
    error = "HTTPError: HTTP 500" if judge == "error" else None
    verdict = {"format": "worldtune.serve.judge", "version": 1, "episode": ep.name, "instruction": "stack",
               "policy": policy, "model": "m", "endpoint": "e", "success": None if error else success,
               "progress": None if error else progress, "rubrics": {}, "errors": 2 if error else 0, "error": error}
    (ep / "judge.json").write_text(json.dumps(verdict))
    return ep


@pytest.fixture
def record(tmp_path) -> Path:
    root = tmp_path / "episodes"
    i = iter(range(100))
    for s, p in [(True, 1.0), (True, 0.75), (True, 1.0), (False, 0.5)]:  # pi0: 3/4, progress 0.8125
        _episode(root, next(i), "pi0", s, p)
    _episode(root, next(i), "pi0", judge="error")
    _episode(root, next(i), "pi0", judge="none")
    for s, p in [(True, 1.0), (False, 0.25), (True, 0.75), (False, 0.0)]:  # diffusion: 2/4, progress 0.5
        _episode(root, next(i), "diffusion", s, p)
    _episode(root, next(i), "diffusion", judge="garbage")
    for s, p in [(True, 0.5), (False, 0.5), (True, 0.5), (False, 1.0)]:  # octo: 2/4 as diffusion, more progress
        _episode(root, next(i), "octo", s, p)
    _episode(root, next(i), None, False, 0.0)  # reset without a label
    _episode(root, next(i), "broken", judge="error")
    (root / ".episode_000099.partial").mkdir()  # a killed write: not an episode
    (root / "notes").mkdir()
    return root


def test_policies_are_grouped_ranked_and_skips_counted(record):
    s = summarize(record)
    assert s.episodes == 17 and s.skipped == {"no_judge": 1, "unreadable": 1, "judge_error": 2}
    rows = {r.policy: r for r in s.policies}
    assert [r.policy for r in s.policies] == ["pi0", "octo", "diffusion", UNLABELLED, "broken"]
    assert [r.rank for r in s.policies] == [1, 2, 3, 4, None]

    pi0 = rows["pi0"]
    assert (pi0.episodes, pi0.judged, pi0.successes) == (6, 4, 3)
    assert pi0.skipped == {"no_judge": 1, "unreadable": 0, "judge_error": 1}
    assert pi0.success_rate == 0.75 and pi0.success_ci == pytest.approx(wilson_interval(3, 4))
    assert pi0.progress == pytest.approx(0.8125)
    lo, hi = pi0.progress_ci
    assert 0.5 <= lo < 0.8125 < hi <= 1.0  # a bootstrap of the four values: inside their range, around the mean
    assert rows["diffusion"].skipped["unreadable"] == 1 and rows["diffusion"].episodes == 5
    assert rows["octo"].progress == pytest.approx(0.625) and rows["diffusion"].progress == pytest.approx(0.5)
    assert rows["octo"].progress_ci == pytest.approx((0.5, 0.875))  # values {.5,.5,.5,1}: 0 to 3 of 4 draws are the 1
    assert rows[UNLABELLED].judged == 1 and rows[UNLABELLED].progress_ci is None  # one rollout: no interval
    assert (rows["broken"].judged, rows["broken"].success_rate, rows["broken"].success_ci) == (0, None, None)


def test_the_command_prints_the_table_and_writes_json(record, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one table row a policy
    out = tmp_path / "summary.json"
    assert main(["serve-summary", str(record), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if " pi0 " in line)
    assert "75 % (3/4)" in row and "30-95 %" in row and "1 no judge.json, 1 judge error" in row
    assert "1 without judge.json, 1 with an unreadable one, 2 with a judge error" in printed
    data = json.loads(out.read_text())
    assert data["format"] == "worldtune.serve.summary" and data["skipped"]["judge_error"] == 2
    assert [p["policy"] for p in data["policies"]][:3] == ["pi0", "octo", "diffusion"]


def test_no_folder_or_no_recordings_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(DatasetError, match="no such folder"):
        summarize(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    assert main(["serve-summary", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "no recorded episodes" in err and err.count("\n") == 1
