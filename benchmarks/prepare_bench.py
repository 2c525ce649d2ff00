"""Grid preparation speed: worldtune's prepare worker vs ffmpeg's xstack filter, same clips, same run.

Task per clip (DESIGN.md §2): 3 cameras of 180x320 h264 -> 2x2 grid 432x768 (cells 216x384, the
bottom-right black), 93 frames at stride 4 (369 source frames), libx264 yuv420p with the SAME
preset and crf on both sides, one thread each (x264 threads=1, decoder 1 thread, filter 1 thread).
"Per core" = clips per CPU-second (user+sys of the process doing the work), so thread counts
do not flatter either side. Sources: per camera, a rendered synthetic frame panned one pixel per
frame (motion x264 has to work on), h264 crf 23.

    .venv/bin/python benchmarks/prepare_bench.py --clips 3 --preset veryfast
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from worldtune.config import PrepareConfig
from worldtune.data import prepare as prep
from worldtune.data.lerobot import VideoSpan
from worldtune.data.synthetic import CAMERA_NAMES, SyntheticEpisode
from worldtune.data.video import VideoWriter

ROLES = ("exterior_1", "exterior_2", "wrist")
F, S, H, W = 93, 4, 432, 768


def make_sources(root: Path, clips: int) -> list[dict[str, Path]]:
    need = prep.frames_needed(F, S) + 3
    out = []
    for c in range(clips):
        ep = SyntheticEpisode(c, 30, seed=1, height=180, width=360)
        paths = {}
        for role, name in zip(ROLES, CAMERA_NAMES):
            base = ep.render_view(name, 10)
            p = root / f"clip{c}_{role}.mp4"
            with VideoWriter(p, 15, crf=23, preset="veryfast") as w:
                for i in range(need):
                    x = (i * 1) % 40
                    w.write(np.ascontiguousarray(base[:, x:x + 320]))
            paths[role] = p
        out.append(paths)
    return out


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_worldtune(sources, out: Path, preset: str, crf: int) -> tuple[float, float]:
    cfg = PrepareConfig(num_frames=F, stride=S, height=H, width=W)
    layout = prep.build_layout(cfg)
    ws = prep.WorkerSettings(str(out), layout.to_dict(), F, S, None, "libx264", crf, preset, 1, "bench",
                             dict(cfg.cameras))
    t0, c0 = time.perf_counter(), _cpu_self()
    for i, paths in enumerate(sources):
        job = prep.EpisodeJob(i, prep.frames_needed(F, S) + 3, "task.", "task.",
                              {r: VideoSpan(p) for r, p in paths.items()}, [0], 15.0)
        rec = prep.process_episode(job, ws)
        assert rec["dropped"] is None, rec
    return time.perf_counter() - t0, _cpu_self() - c0


def ffmpeg_cmd(exe: str, paths: dict[str, Path], out: Path, preset: str, crf: int) -> list[str]:
    ch, cw = H // 2, W // 2
    fps_out = 15 / S
    chains = [f"[{i}:v]select='not(mod(n\\,{S}))',scale={cw}:{ch}:flags=area,setpts=N/({fps_out}*TB)[v{i}]"
              for i in range(3)]
    chains.append(f"color=black:s={cw}x{ch}:r={fps_out}[k]")
    chains.append("[v0][v1][v2][k]xstack=inputs=4:layout=0_0|w0_0|0_h0|w0_h0:shortest=1,format=yuv420p[g]")
    cmd = [exe, "-v", "error", "-y", "-filter_complex_threads", "1"]
    for r in ROLES:
        cmd += ["-threads", "1", "-i", str(paths[r])]
    cmd += ["-filter_complex", ";".join(chains), "-map", "[g]", "-frames:v", str(F), "-r", str(fps_out),
            "-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-threads", "1", "-pix_fmt", "yuv420p", str(out)]
    return cmd


def bench_ffmpeg(sources, out: Path, preset: str, crf: int) -> tuple[float, float]:
    import imageio_ffmpeg

    exe = imageio_ffmpeg.get_ffmpeg_exe()
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), _cpu_children()
    for i, paths in enumerate(sources):
        subprocess.run(ffmpeg_cmd(exe, paths, out / f"clip{i}.mp4", preset, crf), check=True)
    return time.perf_counter() - t0, _cpu_children() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=3)
    ap.add_argument("--preset", default="veryfast")
    ap.add_argument("--crf", type=int, default=18)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sources = make_sources(root / "src", a.clips)
        best: dict[str, tuple[float, float]] = {}
        for rep in range(a.repeats):  # interleaved, best of N: the machine is shared
            for name, fn in (("worldtune (PyAV + OpenCV)", bench_worldtune), ("ffmpeg xstack", bench_ffmpeg)):
                wall, cpu = fn(sources, root / f"{name[:3]}{rep}", a.preset, a.crf)
                if name not in best or cpu < best[name][1]:
                    best[name] = (wall, cpu)
    t = Table(title=f"grid prep: {a.clips} clips, 3x180x320 -> {H}x{W}, {F} frames stride {S}, "
                    f"x264 preset={a.preset} crf={a.crf}, 1 thread")
    for col in ("method", "wall s/clip", "CPU s/clip", "clips/s per core", "frames/s per core"):
        t.add_column(col, justify="right")
    for name, (wall, cpu) in best.items():
        t.add_row(name, f"{wall / a.clips:.2f}", f"{cpu / a.clips:.2f}", f"{a.clips / cpu:.3f}", f"{a.clips * F / cpu:.1f}")
    Console().print(t)


if __name__ == "__main__":
    main()
