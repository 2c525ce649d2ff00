"""Disk and time of `prepare` + `cache` against the streamed `prepare --cache` on a synthetic dataset.

Writes a synthetic three-camera LeRobot v3 dataset (the demo scene, --episodes episodes of
--length frames at --source-size), builds the tiny-predict2.5 model, then runs both paths into fresh
folders with the same settings (2x2 grid clips of --frames frames at --size, one clip an episode,
10 % held out):

  separate  `worldtune prepare` then `worldtune cache` (every clip mp4 stays on disk)
  streamed  `worldtune prepare --cache` (cache.keep_clips = "val", 4 preview episodes)

It reports wall-clock seconds, the bytes of clip mp4s, first-frame PNGs and the cache at the end,
and the peak bytes of clip mp4s during the run (sampled every 0.2 s). The model is tiny, so the
VAE time is small and the comparison is about the data path; on a GPU the VAE part grows, and the
streamed path overlaps it with the prepare workers.

    python benchmarks/stream_bench.py                       # 1,000 episodes (about 10 min on 2 cores)
    python benchmarks/stream_bench.py --episodes 20         # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--length", type=int, default=24, help="frames per episode")
    p.add_argument("--source-size", default="48x80", help="HxW of each camera")
    p.add_argument("--size", default="64x112", help="HxW of the 2x2 grid clips")
    p.add_argument("--frames", type=int, default=17, help="frames per clip")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "stream_bench.json"))
    return p.parse_args()


def folder_bytes(root: Path, sub: str = "") -> int:
    total = 0
    for dirpath, _, files in os.walk(root / sub):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass  # deleted while walking
    return total


class PeakClips:
    """Samples the size of <dataset>/clips in a thread: the most disk the clip mp4s took at once."""

    def __init__(self, root: Path):
        self.root, self.peak, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, folder_bytes(self.root, "clips"))

    def __enter__(self) -> "PeakClips":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, folder_bytes(self.root, "clips"))


def measure(root: Path, seconds: dict[str, float], peak: int) -> dict:
    from worldtune.data.dataset import read_dataset

    _, rows = read_dataset(root)
    return {"seconds": {k: round(v, 1) for k, v in seconds.items()}, "clips": len(rows),
            "clips_on_disk": sum((root / r["video"]).is_file() for r in rows),
            "bytes": {"clips": folder_bytes(root, "clips"), "first_frames": folder_bytes(root, "first_frames"),
                      "cache": folder_bytes(root, "cache"), "peak_clips": peak}}


def main() -> None:
    args = parse()
    from worldtune.config import WorldtuneConfig
    from worldtune.console import quiet_libraries
    from worldtune.data import cache, prepare, stream
    from worldtune.models.load import init_model_dir
    from worldtune.scene.writer import write_demo_dataset

    quiet_libraries()
    import torch

    torch.set_num_threads(1)  # the tiny VAE is fastest on one thread, and the prepare workers use the other cores
    sh, sw = map(int, args.source_size.split("x"))
    h, w = map(int, args.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="stream_bench-"))
    t0 = time.perf_counter()
    src = write_demo_dataset(tmp / "lerobot", episodes=args.episodes, height=sh, width=sw, length=args.length,
                             episodes_per_file=50, preset="ultrafast", workers=args.workers)
    source_s = time.perf_counter() - t0
    model = init_model_dir("tiny-predict2.5", tmp / "model")

    def cfg(out: Path) -> WorldtuneConfig:
        return WorldtuneConfig.model_validate({
            "model": {"path": str(model)},
            "prepare": {"source": str(src), "out": str(out), "height": h, "width": w, "num_frames": args.frames,
                        "workers": args.workers, "val_fraction": 0.1},
            "cache": {"dataset": str(out), "keep_clips": "val", "previews": 4}})

    results = {}
    out = tmp / "separate"
    with PeakClips(out) as peak:
        t = time.perf_counter()
        prepare.run(cfg(out).prepare, quiet=True)
        t_prep = time.perf_counter() - t
        cache.run(cfg(out))
        t_all = time.perf_counter() - t
    results["separate"] = measure(out, {"prepare": t_prep, "cache": t_all - t_prep, "total": t_all}, peak.peak)
    out = tmp / "streamed"
    with PeakClips(out) as peak:
        t = time.perf_counter()
        stream.run(cfg(out))
        t_all = time.perf_counter() - t
    results["streamed"] = measure(out, {"total": t_all}, peak.peak)
    a, b = results["separate"], results["streamed"]
    disk = lambda r: sum(v for k, v in r["bytes"].items() if k != "peak_clips")  # noqa: E731
    result = {
        "benchmark": "stream_bench", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "command": " ".join(["python", "benchmarks/stream_bench.py", *sys.argv[1:]]),
        "dataset": {"episodes": args.episodes, "length": args.length, "cameras": 3, "camera_size": [sh, sw],
                    "clip": [args.frames, h, w], "layout": "grid", "val_fraction": 0.1,
                    "source_bytes": folder_bytes(src), "source_write_s": round(source_s, 1)},
        "model": "tiny-predict2.5", **results,
        "disk_saved_bytes": disk(a) - disk(b), "disk_ratio": round(disk(b) / disk(a), 3),
        "clip_bytes_ratio": round(b["bytes"]["clips"] / a["bytes"]["clips"], 3),
        "peak_clip_bytes_ratio": round(b["bytes"]["peak_clips"] / a["bytes"]["peak_clips"], 3),
        "time_ratio": round(b["seconds"]["total"] / a["seconds"]["total"], 3),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(f"wrote {args.json} (work folder {tmp}, delete when done)")


if __name__ == "__main__":
    main()
