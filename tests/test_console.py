"""The stages' progress display, driven by a fake clock: no sleeps."""

import re

import pytest

from worldtune.console import Progress, duration, rate, setting_up


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _progress(total, clock, lines, **kw):
    return Progress("generate", total, "videos", terminal=False, heartbeat=False, clock=clock, out=lines.append, **kw)


def test_a_line_every_five_percent_with_rate_and_eta():
    clock, lines = Clock(), []
    with _progress(100, clock, lines) as p:
        for _ in range(100):
            clock.t += 0.5  # 0.5 s an item: 5 % (5 items) comes before 30 s
            p.advance()
    assert lines[0] == "generate: 0/100 videos (0%), elapsed 0s"
    assert len(lines) == 1 + 19 + 1, lines  # start, every 5 items, the end (not also a 100 % line)
    assert lines[1] == "generate: 5/100 videos (5%), 2.0 videos/s, ETA 48s, elapsed 2s"
    assert lines[-1] == "generate: done, 100/100 videos in 50s, 2.0 videos/s"


def test_a_line_every_30_s_when_items_are_slow():
    clock, lines = Clock(), []
    with _progress(1000, clock, lines) as p:  # 5 % = 50 items: the 30 s rule prints first
        for _ in range(10):
            clock.t += 12.0
            p.info("base: ep3 s0")
            p.advance()
    middle = lines[1:-1]
    assert [x.split(",")[0] for x in middle] == [f"generate: {n}/1000 videos (1%)" if n >= 5 else
                                                 f"generate: {n}/1000 videos (0%)" for n in (3, 6, 9)], lines
    assert middle[0] == "generate: 3/1000 videos (0%), 12.0 s/video, ETA 3h19m, elapsed 36s - base: ep3 s0"


def test_the_heartbeat_speaks_while_one_item_runs_long():
    clock, lines = Clock(), []
    with _progress(4, clock, lines) as p:
        p.advance()
        n = len(lines)
        clock.t += 29
        p.poll()
        assert len(lines) == n  # not yet 30 s since the last line
        clock.t += 16
        p.poll()
        assert lines[-1].startswith("generate: 1/4 videos (25%)") and lines[-1].endswith("item 2 running 45s")
        p.poll()
        assert len(lines) == n + 1  # the next beat waits another 30 s


def test_unknown_total_resumed_count_and_a_stop():
    clock, lines = Clock(), []
    with pytest.raises(KeyboardInterrupt):
        with Progress("cache", None, "clips", terminal=False, heartbeat=False, clock=clock, out=lines.append) as p:
            clock.t += 40
            p.advance(3)
            raise KeyboardInterrupt
    assert lines[1].startswith("cache: 3 clips, 13.3 s/clip") and "ETA" not in lines[1]
    assert lines[-1] == "cache: stopped at 3 clips in 40s, 13.3 s/clip"
    lines.clear()
    with Progress("train", 10, "steps", completed=4, terminal=False, heartbeat=False, clock=clock, out=lines.append) as p:
        clock.t += 2
        p.advance()
    assert lines[0].startswith("train: 4/10 steps (40%)") and lines[-1] == "train: done, 5/10 steps in 2s, 2.0 s/step"


def test_disabled_progress_prints_nothing_and_notes_go_above_the_bar():
    clock, lines = Clock(), []
    with _progress(3, clock, lines, enabled=False) as p:
        p.advance()
        p.note("skip ep1: unreadable")
    assert lines == []
    with _progress(3, clock, lines) as p:
        p.note("skip ep1: unreadable")
    assert "skip ep1: unreadable" in lines


def test_the_heartbeat_thread_runs_and_stops():
    """The real thread on a fake clock that has already moved 45 s: its first beat prints the running line (waited
    for on an event, not slept); leaving the context stops and joins it."""
    import threading

    clock, lines, beat = Clock(), [], threading.Event()

    def out(line: str) -> None:
        lines.append(line)
        if "running" in line:
            beat.set()

    with Progress("idm", 2, "steps", terminal=False, every_s=0.01, clock=clock, out=out):
        clock.t += 45
        assert beat.wait(10), lines
    assert "item 1 running 45s" in lines[1]
    assert not any(t.name.startswith("progress-idm") for t in threading.enumerate())


def test_setting_up_says_what_and_how_long():
    clock, lines = Clock(), []
    with setting_up("train", "loading model", clock=clock, out=lines.append):
        clock.t += 55.25
    assert lines == ["train: loading model", "train: loading model: 55.2s"]
    with setting_up("train", "loading data", clock=clock, out=lines.append):
        clock.t += 0.2
    assert lines[2:] == ["train: loading data"]  # a quick step: no second line


def test_terminal_bar_draws_without_plain_lines(capsys):
    lines = []
    with Progress("prepare", 3, "episodes", terminal=True, heartbeat=False, out=lines.append) as p:
        for _ in range(3):
            p.advance()
    assert lines == []  # rich draws the bar (to the captured stdout)
    assert "prepare" in capsys.readouterr().out


def test_rate_and_duration_read_well():
    assert (rate(4.1, "clips"), rate(0.5, "batches"), rate(0, "x")) == ("4.1 clips/s", "2.0 s/batch", "-")
    assert (duration(42), duration(185), duration(3720)) == ("42s", "3m05s", "1h02m")


def test_progress_lines_match_one_pattern():
    """Every plain line of a stage is `stage: done/total unit (pct), rate, ETA, elapsed` - one grep finds them."""
    clock, lines = Clock(), []
    with _progress(40, clock, lines) as p:
        for _ in range(40):
            clock.t += 1
            p.advance()
    pattern = re.compile(r"^generate: \d+/40 videos \(\d+%\), (\d+\.\d (videos/s|s/video), ETA \S+, )?elapsed \S+$")
    assert all(pattern.match(x) for x in lines[:-1]), lines
