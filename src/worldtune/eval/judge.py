"""A VLM judge: scores videos with a rubric through any OpenAI-compatible chat-completions server.

The target is Cosmos-Reason2 served by vLLM (docs/eval.md has the command line), but any server
that speaks `/v1/chat/completions` and accepts video works. Each request sends one rubric's
system prompt, its user prompt (with `{instruction}` filled in) and the video, resampled to the
judge's fps, either as one `video_url` part (an H.264 mp4 data URL) or as a list of `image_url`
parts (JPEG frames) for servers that take images only. Greedy decoding (temperature 0).

The score is the first line of the answer that is a lone digit in the rubric's scale; an answer
without one scores None, is excluded from averages, and is counted as a parse failure. Replies
are cached in a JSON-lines file keyed by (video content hash, rubric and its text, model, fps,
input mode), so a rerun only asks what it has not asked before. Only the standard library is
used for HTTP (urllib), so the judge has no dependency beyond worldtune's own.

A reply that is cut short, garbled or not HTTP at all is retried like a dropped connection and,
when retries run out, is that video's `error` (counted), never a crash that loses finished
scores. A circuit breaker stops asking after `max_consecutive_failures` requests in a row have
failed (the server is down): the remaining videos are marked `error` at once instead of each
waiting through its timeouts and retries. A long-lived caller (`worldtune serve`) sets `retry_after`,
so the breaker lets a request through again after that many seconds: a judge server that comes back
is used again, and one that is still down costs one failed request per `retry_after`.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np

from worldtune.atomic import append_jsonl, read_jsonl
from worldtune.errors import EvaluationError

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


# --------------------------------------------------------------------------------------- rubric
@dataclass(frozen=True)
class Rubric:
    """A judging rubric: prompts, score range, and whether the judge sees the instruction."""

    name: str
    system: str
    user: str
    scale: tuple[int, int] = (1, 5)
    needs_instruction: bool = False
    version: int = 1

    @property
    def digest(self) -> str:
        """Hash of the rubric text: editing a rubric invalidates its cached scores."""
        text = json.dumps([self.name, self.system, self.user, list(self.scale), self.version])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def prompt(self, instruction: str | None) -> str:
        return self.user.replace("{instruction}", instruction or "") if self.needs_instruction else self.user


def load_rubric(name_or_path: str) -> Rubric:
    """A shipped rubric by name (src/worldtune/rubrics/<name>.yaml) or a YAML file of the same form."""
    import yaml

    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise EvaluationError(f"rubric file {path} does not exist: pass a shipped rubric name or a YAML path")
        text = path.read_text(encoding="utf-8")
    else:
        ref = resources.files("worldtune") / "rubrics" / f"{name_or_path}.yaml"
        if not ref.is_file():
            shipped = sorted(p.name[:-5] for p in (resources.files("worldtune") / "rubrics").iterdir() if p.name.endswith(".yaml"))
            raise EvaluationError(f"unknown rubric '{name_or_path}': use one of {shipped} or a YAML path")
        text = ref.read_text(encoding="utf-8")
        path = Path(f"{name_or_path}.yaml")
    try:
        data = yaml.safe_load(text)
        lo, hi = (int(v) for v in data.get("scale", (1, 5)))
        return Rubric(name=str(data["name"]), system=str(data["system"]).strip(), user=str(data["user"]).strip(),
                      scale=(lo, hi), needs_instruction=bool(data.get("needs_instruction", "{instruction}" in data["user"])),
                      version=int(data.get("version", 1)))
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise EvaluationError(f"rubric {path}: malformed ({type(e).__name__}: {e}); it needs name, system, user, scale") from None


def parse_score(text: str | None, scale: tuple[int, int] = (1, 5)) -> int | None:
    """The first line that is a lone digit inside the scale ("4", " 4 ", "**4**"), else None."""
    if not text:
        return None
    lo, hi = scale
    for line in text.splitlines():
        s = line.strip().strip("*_`#.").strip()
        if len(s) == 1 and s.isdigit() and lo <= int(s) <= hi:
            return int(s)
    return None


# -------------------------------------------------------------------------------------- payload
def sample_times(num_frames: int, src_fps: float, fps: float) -> np.ndarray:
    """Indices of the source frames nearest to the times 0, 1/fps, 2/fps, ... of the clip."""
    if num_frames <= 0:
        return np.zeros(0, np.int64)
    if src_fps <= 0 or fps <= 0 or fps >= src_fps:
        return np.arange(num_frames)
    duration = num_frames / src_fps
    times = np.arange(0, duration, 1.0 / fps)
    return np.unique(np.clip(np.round(times * src_fps).astype(np.int64), 0, num_frames - 1))


def video_content(path: str | Path, fps: float, mode: Literal["video", "images"] = "video",
                  max_images: int = 32) -> list[dict[str, Any]]:
    """The video file as chat content parts: one mp4 `video_url` part, or JPEG `image_url` parts."""
    from worldtune.eval.video import read_video

    frames, src_fps = read_video(path)
    return frames_content(frames, src_fps, fps, mode, max_images)


def frames_content(frames: np.ndarray, src_fps: float, fps: float, mode: Literal["video", "images"] = "video",
                   max_images: int = 32) -> list[dict[str, Any]]:
    """Frames [T, H, W, 3] uint8 at `src_fps` as chat content parts, resampled to `fps`."""
    import cv2

    from worldtune.eval.video import encode_video

    frames = frames[sample_times(len(frames), src_fps, fps)]
    if mode == "video":
        data = base64.b64encode(encode_video(frames, fps=min(fps, src_fps) if src_fps > 0 else fps)).decode()
        return [{"type": "video_url", "video_url": {"url": f"data:video/mp4;base64,{data}"}}]
    if len(frames) > max_images:
        frames = frames[np.linspace(0, len(frames) - 1, max_images).round().astype(int)]
    parts = []
    for f in frames:
        ok, jpg = cv2.imencode(".jpg", cv2.cvtColor(f, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
        parts.append({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(jpg.tobytes()).decode()}})
    return parts


def frames_hash(frames: np.ndarray, fps: float) -> str:
    """sha256 of frames held in memory (shape, rate and pixels): their cache key, apart from files' keys."""
    h = hashlib.sha256(f"frames {list(frames.shape)} {fps:g} ".encode())
    h.update(np.ascontiguousarray(frames, np.uint8).data)
    return h.hexdigest()


def file_hash(path: str | Path) -> str:
    """sha256 of a file's bytes: the cache key follows the content, not the name."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------------------- client
class EndpointError(EvaluationError):
    """The judge server could not be reached or kept failing after all retries."""


def chat_url(endpoint: str) -> str:
    """Accept http://host:8000, http://host:8000/v1 or the full .../v1/chat/completions URL."""
    e = endpoint.rstrip("/")
    if e.endswith("/chat/completions"):
        return e
    return e + "/chat/completions" if e.endswith("/v1") else e + "/v1/chat/completions"


@dataclass
class ChatClient:
    """POSTs chat-completions requests with a timeout and exponential backoff on transient failures."""

    endpoint: str
    timeout: float = 300.0
    retries: int = 4  # extra attempts after the first
    backoff: float = 2.0  # seconds before the first retry; doubles each time (with ±25% jitter)
    api_key: str | None = None

    def complete(self, body: dict[str, Any]) -> tuple[str, int]:
        """The reply text and the number of attempts it took; raises EndpointError when all fail."""
        url = chat_url(self.endpoint)
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1) * random.uniform(0.75, 1.25))
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    reply = json.loads(resp.read().decode("utf-8"))
                return str(reply["choices"][0]["message"]["content"] or ""), attempt + 1
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code} from {url}"
                if e.code not in RETRY_STATUS:
                    detail = e.read()[:200].decode("utf-8", "replace")
                    raise EndpointError(f"{last}: {detail} (check judge_model and the server's video support)") from None
            except (urllib.error.URLError, socket.timeout, ConnectionError, TimeoutError) as e:
                last = f"cannot reach {url} ({getattr(e, 'reason', e)})"
            except (http.client.HTTPException, OSError) as e:  # a reply cut mid-body, or not HTTP at all
                last = f"broken reply from {url} ({type(e).__name__})"
            except (json.JSONDecodeError, KeyError, IndexError, TypeError, UnicodeDecodeError) as e:
                last = f"malformed reply from {url} ({type(e).__name__})"
        raise EndpointError(f"{last} after {self.retries + 1} attempts: is the judge server up (see docs/eval.md)?")


# ---------------------------------------------------------------------------------------- cache
class JudgeCache:
    """Replies keyed by (video hash, rubric, rubric digest, model, fps, mode), one JSON per line.

    Append-only and thread-safe; a truncated last line (a killed run) is ignored on load.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._rows: dict[str, dict[str, Any]] = {}
        if self.path:
            for row in read_jsonl(self.path):
                if isinstance(row, dict) and "key" in row:
                    self._rows[row["key"]] = row

    @staticmethod
    def key(video_hash: str, rubric: Rubric, model: str, fps: float, mode: str) -> str:
        return hashlib.sha256(json.dumps([video_hash, rubric.name, rubric.digest, model, fps, mode]).encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._rows.get(key)

    def put(self, key: str, row: dict[str, Any]) -> None:
        row = {"key": key, **row}
        with self._lock:
            self._rows[key] = row
            if self.path:
                append_jsonl(self.path, row)

    def __len__(self) -> int:
        return len(self._rows)


# ---------------------------------------------------------------------------------------- judge
@dataclass(frozen=True)
class JudgeItem:
    """One video to judge; `instruction` is the task text (needed by instruction-following rubrics)."""

    id: str
    video: str
    instruction: str | None = None


@dataclass
class JudgeResult:
    id: str
    rubric: str
    score: int | None
    text: str | None = None  # the judge's full answer (its explanation follows the score)
    status: str = "ok"  # ok | cached | parse_failed | error | skipped
    error: str | None = None
    attempts: int = 0

    @property
    def explanation(self) -> str:
        """The answer without its score line: what the report shows next to the video. The line is found by
        the score itself, so rubrics of any scale (a 0/1 verdict too) lose exactly that line."""
        lines = (self.text or "").strip().splitlines()
        if self.score is not None:
            for i, line in enumerate(lines):
                if parse_score(line, (self.score, self.score)) is not None:
                    return "\n".join(lines[:i] + lines[i + 1:]).strip()
        return "\n".join(lines).strip()


@dataclass
class Judge:
    """Scores videos with rubrics on an OpenAI-compatible endpoint, in parallel threads, cached."""

    endpoint: str
    model: str = "nvidia/Cosmos-Reason2-2B"
    rubrics: Sequence[str | Rubric] = ("physical_plausibility", "instruction_following")
    fps: float = 16.0
    input: Literal["video", "images"] = "video"
    max_images: int = 32
    concurrency: int = 4
    timeout: float = 300.0
    retries: int = 4
    backoff: float = 2.0
    max_tokens: int = 512
    cache_path: str | Path | None = None
    api_key: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. {"mm_processor_kwargs": {"fps": 16}}
    max_consecutive_failures: int = 3  # the breaker: this many failed requests in a row = the server is down
    retry_after: float | None = None  # seconds before an open breaker lets a request through again; None: never

    def __post_init__(self) -> None:
        self._rubrics = [r if isinstance(r, Rubric) else load_rubric(r) for r in self.rubrics]
        self.client = ChatClient(self.endpoint, timeout=self.timeout, retries=self.retries,
                                 backoff=self.backoff, api_key=self.api_key)
        self.cache = JudgeCache(self.cache_path)
        self._failures = 0  # consecutive failed requests, across threads
        self._down: str | None = None  # why the breaker opened
        self._down_since = 0.0  # time.monotonic() when it opened
        self._state = threading.Lock()

    def _record(self, error: str | None) -> None:
        with self._state:
            if error is None:
                self._failures = 0
                return
            self._failures += 1
            if self._failures >= max(1, self.max_consecutive_failures) and self._down is None:
                again = (f"it is asked again after {self.retry_after:g} s" if self.retry_after is not None
                         else "start the server and rerun: finished scores are cached")
                self._down = f"judge stopped after {self._failures} failed requests in a row (last: {error}); {again}"
                self._down_since = time.monotonic()

    def _breaker(self) -> str | None:
        """Why requests are not sent now (the breaker is open), or None. After `retry_after` seconds the breaker
        half-opens: the next request is sent, and since the failure count stays at the limit, one more failure
        opens it again at once."""
        with self._state:
            if (self._down is not None and self.retry_after is not None
                    and time.monotonic() - self._down_since >= self.retry_after):
                self._down = None
            return self._down

    @property
    def rubric_list(self) -> list[Rubric]:
        return list(self._rubrics)

    def request_body(self, rubric: Rubric, content: list[dict[str, Any]], instruction: str | None) -> dict[str, Any]:
        """The chat-completions request: system rubric, then the video parts and the user prompt."""
        return {"model": self.model, "temperature": 0.0, "max_tokens": self.max_tokens,
                "messages": [{"role": "system", "content": rubric.system},
                             {"role": "user", "content": [*content, {"type": "text", "text": rubric.prompt(instruction)}]}],
                **self.extra_body}

    def judge_video(self, item: JudgeItem) -> list[JudgeResult]:
        """Every rubric for one video; the video is encoded once and only if some answer is not cached."""
        try:
            vhash = file_hash(item.video)
        except OSError as e:
            return [JudgeResult(item.id, r.name, None, status="error", error=f"unreadable video ({e.strerror})")
                    for r in self._rubrics]
        return self._judge(item, vhash, lambda: video_content(item.video, self.fps, self.input, self.max_images))

    def judge_frames(self, item_id: str, frames: np.ndarray, fps: float, instruction: str | None) -> list[JudgeResult]:
        """Every rubric for a video held in memory as frames [T, H, W, 3] at `fps`: encoded once, for the judge,
        where a file would be written, read back and encoded again (`worldtune serve`'s tiled cameras)."""
        item = JudgeItem(item_id, "", instruction)
        return self._judge(item, frames_hash(frames, fps),
                           lambda: frames_content(frames, fps, self.fps, self.input, self.max_images))

    def _judge(self, item: JudgeItem, vhash: str, make_content: Callable[[], list[dict[str, Any]]]) -> list[JudgeResult]:
        """The rubrics of one video known by its hash; `make_content` builds its chat parts when first needed."""
        from worldtune.eval.video import VideoReadError

        content: list[dict[str, Any]] | None = None
        out = []
        for rubric in self._rubrics:
            if rubric.needs_instruction and not item.instruction:
                out.append(JudgeResult(item.id, rubric.name, None, status="skipped", error="no instruction"))
                continue
            key = JudgeCache.key(vhash, rubric, self.model, self.fps, self.input)
            hit = self.cache.get(key)
            if hit is not None:
                score = parse_score(hit.get("text"), rubric.scale)
                out.append(JudgeResult(item.id, rubric.name, score, hit.get("text"),
                                       status="cached" if score is not None else "parse_failed"))
                continue
            down = self._breaker()
            if down is not None:
                out.append(JudgeResult(item.id, rubric.name, None, status="error", error=down))
                continue
            try:
                if content is None:
                    content = make_content()
                text, attempts = self.client.complete(self.request_body(rubric, content, item.instruction))
            except VideoReadError as e:
                out.append(JudgeResult(item.id, rubric.name, None, status="error", error=str(e)))
                continue
            except EndpointError as e:
                self._record(str(e))
                out.append(JudgeResult(item.id, rubric.name, None, status="error", error=str(e)))
                continue
            self._record(None)
            score = parse_score(text, rubric.scale)
            self.cache.put(key, {"video_hash": vhash, "rubric": rubric.name, "rubric_digest": rubric.digest,
                                 "model": self.model, "fps": self.fps, "input": self.input, "text": text})
            out.append(JudgeResult(item.id, rubric.name, score, text, attempts=attempts,
                                   status="ok" if score is not None else "parse_failed"))
        return out

    def judge_many(self, items: Sequence[JudgeItem], progress: bool = True) -> list[JudgeResult]:
        """All rubrics for all videos, `concurrency` requests at a time, with a progress bar."""
        from worldtune.console import Progress

        results: dict[int, list[JudgeResult]] = {}
        with Progress("VLM judge", len(items), "videos", enabled=progress) as bar:
            with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
                futures = {pool.submit(self.judge_video, it): i for i, it in enumerate(items)}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    bar.advance()
        return [r for i in range(len(items)) for r in results[i]]


def summarize_judge(results: Sequence[JudgeResult]) -> dict[str, dict[str, Any]]:
    """Per rubric: scored, mean, std, and how many answers were cached, unparsable, failed or skipped."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        s = out.setdefault(r.rubric, {"scores": [], "cached": 0, "parse_failed": 0, "error": 0, "skipped": 0})
        if r.score is not None:
            s["scores"].append(r.score)
        if r.status in ("cached", "parse_failed", "error", "skipped"):
            s[r.status] += 1
    for s in out.values():
        sc = np.asarray(s.pop("scores"), float)
        s.update(n=int(len(sc)), mean=float(sc.mean()) if len(sc) else None, std=float(sc.std()) if len(sc) else None)
    return out


__all__ = ["Judge", "JudgeItem", "JudgeResult", "Rubric", "load_rubric", "parse_score", "ChatClient",
           "JudgeCache", "EndpointError", "summarize_judge", "video_content", "frames_content", "sample_times",
           "chat_url"]
