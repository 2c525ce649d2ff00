"""Fixtures of the evaluation tests: tiny generation folders and a real chat-completions server."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from eval_scene import exterior_cams, moving_cam, render, sine_warp  # noqa: E402

from worldtune.eval.video import write_video  # noqa: E402

LAYOUT = {"type": "grid", "rows": 2, "cols": 2,
          "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]}}
H, W = 180, 320


def grid_frames(num_frames: int, wobble: float = 0.0, seed: int = 0) -> np.ndarray:
    """2x2 grid video of the box scene; `wobble` px of per-frame non-rigid warp (a bad generator)."""
    rng = np.random.default_rng(seed)
    a, b = exterior_cams()
    ext1, ext2 = render(a), render(b)
    frames = []
    for t in range(num_frames):
        views = [ext1, ext2, render(moving_cam(t))]
        if wobble:
            views = [sine_warp(v, wobble, period=60, phase=float(rng.uniform(0, 6.28))) for v in views]
        g = np.zeros((2 * H, 2 * W, 3), np.uint8)
        g[:H, :W], g[:H, W:], g[H:, :W] = views
        frames.append(g)
    return np.stack(frames)


def make_generation_folder(root: Path, frames: int = 5, broken: bool = False) -> Path:
    """base (wobbly) and lora (clean) x 2 seeds for one input, plus ground truth; optional bad rows."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1,
                                                "layout": LAYOUT, "fps": 16}))
    rows = []
    gt = write_video(root / "ground_truth" / "ep0.mp4", grid_frames(frames), 16)
    for model, wobble in (("base", 2.5), ("lora", 0.0)):
        for seed in (0, 1):
            rel = f"{model}/ep0_s{seed}.mp4"
            write_video(root / rel, grid_frames(frames, wobble, seed), 16)
            rows.append({"model": model, "name": "ep0", "seed": seed, "prompt": "A multi-view video shows that a robot picks.",
                         "instruction": "picks up the red cube.", "video": rel, "views": {},
                         "ground_truth": str(gt.relative_to(root)), "ground_truth_views": {},
                         "fps": 16, "num_frames": frames, "height": 2 * H, "width": 2 * W, "steps": 4, "guidance": 7.0})
    if broken:
        (root / "base" / "bad_s0.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 definitely not a video")
        write_video(root / "base" / "one_s0.mp4", grid_frames(1), 16)
        for name in ("bad", "one"):
            rows.append({**rows[0], "name": name, "video": f"base/{name}_s0.mp4", "ground_truth": None})
    with open(root / "generations.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write('{"model": "base", "name": "torn')  # a line cut by a crash
    return root


@pytest.fixture(scope="session")
def gen_folder(tmp_path_factory) -> Path:
    return make_generation_folder(tmp_path_factory.mktemp("gen") / "generations", broken=True)


# ------------------------------------------------------------------------- chat-completions server
class FakeJudge:
    """Behaviour of the fake server: deterministic scores, optional garbage and 500s."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.fail_first = 0  # answer HTTP 500 to this many requests first
        self.garbage_every = 0  # every k-th request gets an answer without a score line
        self.lock = threading.Lock()

    def answer(self, body: dict) -> tuple[int, dict | None]:
        with self.lock:
            self.requests.append(body)
            n = len(self.requests)
            if n <= self.fail_first:
                return 500, None
        parts = body["messages"][1]["content"]
        media = [p for p in parts if p["type"] in ("video_url", "image_url")]
        text = parts[-1]["text"]
        url = media[0][media[0]["type"]]["url"]
        score = len(url) % 5 + 1
        if "instructed" in text:
            score = 5 if "red cube" in text else 1
        content = f"Looking at the video.\n{score}\nThe motion is plausible." if not (
            self.garbage_every and n % self.garbage_every == 0) else "I cannot tell, maybe 7 or so."
        return 200, {"id": f"c{n}", "object": "chat.completion", "model": body["model"],
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


@pytest.fixture()
def judge_server():
    state = FakeJudge()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code, reply = state.answer(body)
            data = json.dumps(reply or {"error": "boom"}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()
