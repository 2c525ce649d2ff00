"""The VLM judge against a real HTTP server speaking the chat-completions wire format."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from worldtune.errors import EvaluationError
from worldtune.eval.judge import (ChatClient, EndpointError, Judge, JudgeItem, chat_url, load_rubric, parse_score,
                                  sample_times, summarize_judge)
from worldtune.eval.video import read_video, write_video


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("judge_videos")
    rng = np.random.default_rng(0)
    out = []
    for i in range(4):
        frames = rng.integers(0, 255, (32, 48, 64, 3), dtype=np.uint8)
        out.append(str(write_video(root / f"v{i}.mp4", frames, 32)))
    return out


def test_shipped_rubrics():
    phys, instr = load_rubric("physical_plausibility"), load_rubric("instruction_following")
    assert phys.scale == instr.scale == (1, 5)
    assert not phys.needs_instruction and "{instruction}" not in phys.user
    assert instr.needs_instruction and "pick the cup" in instr.prompt("pick the cup")
    assert phys.digest != instr.digest
    with pytest.raises(EvaluationError, match="unknown rubric"):
        load_rubric("nonexistent")


def test_task_rubrics_of_other_scales():
    """The rollout rubrics of `worldtune serve`: a 0/1 verdict and a 0..4 progress, read by the same parser."""
    from worldtune.eval.judge import JudgeResult

    success, progress = load_rubric("task_success"), load_rubric("task_progress")
    assert (success.scale, progress.scale) == ((0, 1), (0, 4))
    assert success.needs_instruction and progress.needs_instruction and "stack the cups" in success.prompt("stack the cups")
    assert parse_score("0\nnot yet", success.scale) == 0 and parse_score("3", success.scale) is None
    r = JudgeResult("a", "task_success", 0, "Looking.\n0\nThe cup is still on the table.")
    assert r.explanation == "Looking.\nThe cup is still on the table."


def test_parse_score():
    assert parse_score("4\nbecause") == 4
    assert parse_score("Let me look.\n **3** \nok") == 3
    assert parse_score("The score is 4.\n2") == 2  # first *lone* digit line
    assert parse_score("7\n0\n") is None  # out of scale
    assert parse_score("I would say 4") is None
    assert parse_score("") is None and parse_score(None) is None


def test_sample_times_and_url():
    assert list(sample_times(32, 32.0, 16.0)) == list(range(0, 32, 2))
    assert len(sample_times(10, 16.0, 16.0)) == 10
    assert chat_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert chat_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"


def test_judge_video_mode_scores_caches_and_counts(judge_server, videos, tmp_path):
    judge_server.garbage_every = 5
    cache = tmp_path / "cache.jsonl"
    judge = Judge(judge_server.url, model="test-model", fps=16, concurrency=3, cache_path=cache, backoff=0.01)
    items = [JudgeItem(f"id{i}", v, "picks up the red cube.") for i, v in enumerate(videos[:3])]
    items.append(JudgeItem("noinstr", videos[3], None))
    results = judge.judge_many(items, progress=False)
    assert len(results) == 8
    sent = judge_server.requests
    assert len(sent) == 7  # the instruction rubric is not asked without an instruction
    body = sent[0]
    assert body["model"] == "test-model" and body["temperature"] == 0.0
    assert body["messages"][0]["role"] == "system"
    part = body["messages"][1]["content"][0]
    assert part["type"] == "video_url" and part["video_url"]["url"].startswith("data:video/mp4;base64,")
    # the video sent is the clip resampled to the judge's 16 fps: 32 frames at 32 fps -> 16
    clip = tmp_path / "sent.mp4"
    clip.write_bytes(base64.b64decode(part["video_url"]["url"].split(",", 1)[1]))
    assert read_video(clip)[0].shape[0] == 16
    by = {(r.id, r.rubric): r for r in results}
    assert by[("noinstr", "instruction_following")].status == "skipped"
    instr = [r for r in results if r.rubric == "instruction_following" and r.status == "ok"]
    assert instr and all(r.score == 5 for r in instr)
    assert all(r.explanation == "Looking at the video.\nThe motion is plausible." for r in instr)
    summary = summarize_judge(results)
    failed = sum(s["parse_failed"] for s in summary.values())
    assert failed == 1  # request 5 of 7 was garbage: counted, not scored
    assert sum(s["n"] for s in summary.values()) == 6
    # a rerun answers everything from the cache: no new request
    again = Judge(judge_server.url, model="test-model", fps=16, cache_path=cache).judge_many(items, progress=False)
    assert len(judge_server.requests) == 7
    assert [r.score for r in again] == [r.score for r in results]
    assert sum(r.status == "cached" for r in again) == 6
    # another model or fps is a different question
    Judge(judge_server.url, model="other", fps=16, cache_path=cache,
          rubrics=["physical_plausibility"]).judge_many(items[:1], progress=False)
    assert len(judge_server.requests) == 8
    assert all(json.loads(line)["key"] for line in cache.read_text().splitlines())


def test_judge_images_mode(judge_server, videos):
    judge = Judge(judge_server.url, rubrics=["physical_plausibility"], input="images", max_images=5, fps=8)
    (r,) = judge.judge_many([JudgeItem("a", videos[0])], progress=False)
    parts = judge_server.requests[0]["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["image_url"] * 5 + ["text"]
    assert r.score is not None and 1 <= r.score <= 5


def test_retries_with_backoff_then_success(judge_server, videos):
    judge_server.fail_first = 2
    judge = Judge(judge_server.url, rubrics=["physical_plausibility"], retries=3, backoff=0.01)
    (r,) = judge.judge_many([JudgeItem("a", videos[1])], progress=False)
    assert r.status == "ok" and r.attempts == 3 and len(judge_server.requests) == 3


def test_retries_exhausted_and_unreachable_are_errors_not_crashes(judge_server, videos, tmp_path):
    judge_server.fail_first = 100
    judge = Judge(judge_server.url, rubrics=["physical_plausibility"], retries=1, backoff=0.01)
    (r,) = judge.judge_many([JudgeItem("a", videos[1])], progress=False)
    assert r.status == "error" and "HTTP 500" in r.error and r.score is None
    with pytest.raises(EndpointError, match="cannot reach"):
        ChatClient("http://127.0.0.1:9", retries=0, timeout=2).complete({"model": "x", "messages": []})
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"garbage")
    (r,) = Judge(judge_server.url, rubrics=["physical_plausibility"]).judge_many([JudgeItem("b", str(bad))], progress=False)
    assert r.status == "error" and "bad.mp4" in r.error and "re-encode or remove it" in r.error
