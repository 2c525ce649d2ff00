"""The judge facing a broken server: cut replies, non-HTTP replies, a server that is down."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from worldtune.data.video import write_video
from worldtune.eval.judge import Judge, JudgeItem


class RawServer:
    """A TCP server answering every request with fixed bytes, then closing; counts requests."""

    def __init__(self, reply: bytes) -> None:
        self.reply, self.requests = reply, 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, body = data.split(b"\r\n\r\n", 1)
                length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                conn.sendall(self.reply)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("judge")
    fr = np.random.default_rng(0).integers(0, 255, (4, 32, 32, 3), dtype=np.uint8)
    return [str(write_video(d / f"v{i}.mp4", fr + i, fps=8)) for i in range(12)]


CUT = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"choices": [{"mess'
NOT_HTTP = b"SSH-2.0-OpenSSH_9.6\r\n"
DOWN = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("reply", [CUT, NOT_HTTP], ids=["cut_mid_body", "not_http"])
def test_broken_replies_are_counted_errors_not_crashes(reply, clips):
    server = RawServer(reply)
    judge = Judge(server.url, rubrics=["physical_plausibility"], retries=1, backoff=0.01, concurrency=1)
    results = judge.judge_many([JudgeItem("a", clips[0]), JudgeItem("b", clips[1])], progress=False)
    assert [r.status for r in results] == ["error", "error"]
    assert "broken reply" in results[0].error and server.requests == 4  # each tried twice


def test_a_down_judge_stops_early(clips):
    server = RawServer(DOWN)
    judge = Judge(server.url, rubrics=["physical_plausibility"], retries=0, backoff=0.01, concurrency=1)
    results = judge.judge_many([JudgeItem(str(i), c) for i, c in enumerate(clips)], progress=False)
    assert all(r.status == "error" for r in results) and len(results) == 12
    assert server.requests == 3, server.requests  # the breaker opened after 3 failures in a row
    assert "judge stopped after 3 failed requests" in results[-1].error
