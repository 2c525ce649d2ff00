"""Fixtures of the evaluation tests: tiny generation folders and a real chat-completions server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.eval.eval_scene import make_generation_folder

@pytest.fixture(scope="session")
def gen_folder(tmp_path_factory) -> Path:
    return make_generation_folder(tmp_path_factory.mktemp("gen") / "generations", broken=True)


@pytest.fixture(scope="session")
def evaluated(gen_folder, tmp_path_factory):
    """`worldtune evaluate` on gen_folder, no judge endpoint: (out folder, results)."""
    from worldtune.config import EvaluateConfig
    from worldtune.eval.evaluate import run

    out = tmp_path_factory.mktemp("eval")
    cfg = EvaluateConfig(runs=[str(gen_folder)], out=str(out), workers=2,
                         metrics=["sampson_temporal", "sampson_crossview", "sampson_crossview_dynamic", "pixels",
                                  "judge_physics", "judge_instruction"])
    return out, run(cfg)


# ------------------------------------------------------------------------- chat-completions server
class FakeJudge:
    """Behaviour of the fake server: deterministic scores, optional garbage and 500s."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.fail_first = 0  # answer HTTP 500 to this many requests first
        self.garbage_every = 0  # every k-th request gets an answer without a score line
        self.reply = None  # a function body -> answer text, in place of the scores below
        self.lock = threading.Lock()

    def answer(self, body: dict) -> tuple[int, dict | None]:
        with self.lock:
            self.requests.append(body)
            n = len(self.requests)
            if n <= self.fail_first:
                return 500, None
        if self.reply is not None:
            return 200, self._completion(body, n, self.reply(body))
        parts = body["messages"][1]["content"]
        media = [p for p in parts if p["type"] in ("video_url", "image_url")]
        text = parts[-1]["text"]
        url = media[0][media[0]["type"]]["url"]
        score = len(url) % 5 + 1
        if "instructed" in text:
            score = 5 if "red cube" in text else 1
        content = f"Looking at the video.\n{score}\nThe motion is plausible." if not (
            self.garbage_every and n % self.garbage_every == 0) else "I cannot tell, maybe 7 or so."
        return 200, self._completion(body, n, content)

    @staticmethod
    def _completion(body: dict, n: int, content: str) -> dict:
        return {"id": f"c{n}", "object": "chat.completion", "model": body["model"],
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
