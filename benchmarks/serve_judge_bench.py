"""What judging a rollout adds to `worldtune serve`'s `end`, apart from the VLM's own answers.

A recorded episode the size a Cosmos 3 Edge grid server writes (3 cameras of 240x416, the cells of a
480x832 2x2 grid; 8 chunks of 16 actions = 129 frames at 15 fps; a smooth texture panning under noise, so
the encoder has real work) is judged by `RolloutJudge` against a chat-completions server on 127.0.0.1 that
answers at once. So the time is worldtune's share: tiling the cameras, encoding the judged mp4, base64 and
HTTP for the two rubrics, writing judge.json. Two ways: as the server judges (the recorder hands over the
frames it wrote) and as a later re-judging of the folder does (the lossless videos decoded again). A real
judge's time (Cosmos-Reason2 reading the video and writing two short answers) comes on top. Median of
--repeats runs (the judge is rebuilt each run, so nothing is cached), wall and CPU seconds of the process
(CPU seconds are the steadier figure on a shared machine).

    .venv/bin/python benchmarks/serve_judge_bench.py --repeats 3 --json benchmarks/results/serve_judge_bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import cv2
import numpy as np

from worldtune.config import ServeJudgeConfig
from worldtune.serve.judging import rollout_judge
from worldtune.serve.recorder import EpisodeRecorder

ROLES = ("exterior_1", "exterior_2", "wrist")


def camera_frames(frames: int, h: int, w: int, seed: int) -> np.ndarray:
    """A blurred random texture panning 2 px a frame, with a little noise: like a camera, not like static."""
    rng = np.random.default_rng(seed)
    canvas = rng.integers(0, 256, (h + frames, w + 2 * frames, 3), dtype=np.uint8)
    canvas = cv2.normalize(cv2.GaussianBlur(canvas, (0, 0), 3.0), None, 0, 255, cv2.NORM_MINMAX)
    video = np.stack([canvas[t // 2: t // 2 + h, 2 * t: 2 * t + w] for t in range(frames)]).astype(np.int16)
    return np.clip(video + rng.integers(-4, 5, video.shape), 0, 255).astype(np.uint8)


def record_episode(folder: Path, chunks: int, k: int, h: int, w: int) -> tuple[Path, dict[str, np.ndarray]]:
    keys = {r: f"observation.images.{r}" for r in ROLES}
    rec = EpisodeRecorder(folder, 15, keys, {r: (h, w) for r in ROLES}, [f"a{i}" for i in range(10)])
    videos = {r: camera_frames(1 + chunks * k, h, w, i) for i, r in enumerate(ROLES)}
    rec.start({r: v[:1] for r, v in videos.items()}, "put the red cube in the bowl", {"source/seed": 0})
    for c in range(chunks):
        rec.add({r: v[1 + c * k: 1 + (c + 1) * k] for r, v in videos.items()}, np.zeros((k, 10), np.float32))
    return rec.finish(), rec.take_written()


class Instant(BaseHTTPRequestHandler):
    """A chat-completions server that answers every request at once, and notes the request's size."""

    sizes: list[int] = []

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers["Content-Length"])
        self.rfile.read(n)
        Instant.sizes.append(n)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "1\nDone."}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--chunk-size", type=int, default=16)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--width", type=int, default=416)
    ap.add_argument("--json", type=str, default=None, help="write the figures here")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Instant)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    out: dict = {"episode": {"cameras": len(ROLES), "frames": 1 + args.chunks * args.chunk_size,
                             "size": [args.height, args.width], "fps": 15}}
    with tempfile.TemporaryDirectory() as tmp:
        episode, written = record_episode(Path(tmp), args.chunks, args.chunk_size, args.height, args.width)
        rollout_judge(ServeJudgeConfig(endpoint=url))(episode, "warm-up: imports", written)
        for name, frames in (("server (frames handed over)", written), ("re-judging the folder (decoded)", None)):
            times, cpu = [], []
            for _ in range(args.repeats):
                judge = rollout_judge(ServeJudgeConfig(endpoint=url))
                t0, c0 = time.perf_counter(), time.process_time()
                verdict = judge(episode, "put the red cube in the bowl", frames)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                assert verdict["errors"] == 0 and verdict["success"] is True, verdict
            out[name] = {"seconds_median": round(float(np.median(times)), 3), "seconds": [round(t, 3) for t in times],
                         "cpu_seconds_median": round(float(np.median(cpu)), 3)}
    server.shutdown()
    out.update({"requests_per_rollout": 2, "request_mb": round(float(np.median(Instant.sizes)) / 2 ** 20, 2),
                "machine": f"{platform.machine()}, {cv2.getNumberOfCPUs()} CPUs", "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
