"""Grid preparation speed: worldtune's prepare worker vs ffmpeg's xstack filter, same clips, same run.

Task per clip (DESIGN.md §2): 3 cameras of 180x320 h264 -> 2x2 grid 432x768 (cells 216x384, the
bottom-right black), 93 frames at stride 4 (369 source frames), libx264 yuv420p with the SAME
preset and crf on both sides, one thread each (x264 threads=1, decoder 1 thread, filter 1 thread),
x264's macroblock tree off on both sides (what one thread means in worldtune: same bytes every run).
"Per core" = clips per CPU-second (user+sys of the process doing the work), so thread counts
do not flatter either side. Sources: per camera, a rendered synthetic frame panned one pixel per
frame (motion x264 has to work on), h264 crf 23.

Quality: worldtune keeps the decoder's yuv420p planes from decoder to encoder. The same clips are
also made the way prepare made them before (decode to RGB, resize and tile in RGB, the encoder
converts back to yuv420p), and the bench reports the PSNR of the new clips against those, and of
both against the uncompressed RGB grid. The raw result goes to --out (JSON, `ratio_per_core` =
worldtune clips per CPU-second / ffmpeg's).

    .venv/bin/python benchmarks/prepare_bench.py --clips 3 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from worldtune.config import PrepareConfig
from worldtune.data import prepare as prep
from worldtune.data.layout import GridLayout
from worldtune.data.lerobot import VideoSpan
from worldtune.data.video import REPRODUCIBLE_X264, VideoWriter, read_frames
from worldtune.scene.episode import CAMERA_NAMES, SyntheticEpisode

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
            "-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-threads", "1", "-x264-params", REPRODUCIBLE_X264,
            "-pix_fmt", "yuv420p", str(out)]
    return cmd


def bench_ffmpeg(sources, out: Path, preset: str, crf: int) -> tuple[float, float]:
    import imageio_ffmpeg

    exe = imageio_ffmpeg.get_ffmpeg_exe()
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), _cpu_children()
    for i, paths in enumerate(sources):
        subprocess.run(ffmpeg_cmd(exe, paths, out / f"clip{i}.mp4", preset, crf), check=True)
    return time.perf_counter() - t0, _cpu_children() - c0


def rgb_path_grid(paths: dict[str, Path]) -> np.ndarray:
    """The uncompressed grid as prepare built it before: RGB decode, RGB resize and tiling."""
    idx = list(range(0, prep.frames_needed(F, S), S))
    return GridLayout(height=H, width=W).pack({r: read_frames(p, idx) for r, p in paths.items()})


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def quality(sources, new_clips: Path, preset: str, crf: int, out: Path) -> dict[str, float]:
    """Mean PSNR (dB, RGB) over clips: new vs old path, and each against the uncompressed RGB grid."""
    scores: dict[str, list[float]] = {"new_vs_old": [], "old_vs_uncompressed": [], "new_vs_uncompressed": []}
    for i, paths in enumerate(sources):
        grid = rgb_path_grid(paths)
        old = out / f"old{i}.mp4"
        with VideoWriter(old, 15 / S, crf=crf, preset=preset, threads=1) as w:
            for f in grid:
                w.write(f)
        new = read_frames(next(new_clips.rglob(f"ep{i:06d}_*.mp4")))
        old_frames = read_frames(old)
        scores["new_vs_old"].append(psnr(new, old_frames))
        scores["old_vs_uncompressed"].append(psnr(old_frames, grid))
        scores["new_vs_uncompressed"].append(psnr(new, grid))
    return {k: round(float(np.mean(v)), 2) for k, v in scores.items()}


def versions() -> dict[str, str]:
    import av
    import cv2

    return {"python": platform.python_version(), "pyav": av.__version__,
            "libavcodec": ".".join(map(str, av.library_versions["libavcodec"])), "opencv": cv2.__version__,
            "numpy": np.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=3)
    ap.add_argument("--preset", default="veryfast")
    ap.add_argument("--crf", type=int, default=18)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/prepare_bench.json", help="raw result (JSON)")
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
        psnr_db = quality(sources, root / "wor0", a.preset, a.crf, root)
    t = Table(title=f"grid prep: {a.clips} clips, 3x180x320 -> {H}x{W}, {F} frames stride {S}, "
                    f"x264 preset={a.preset} crf={a.crf}, 1 thread")
    for col in ("method", "wall s/clip", "CPU s/clip", "clips/s per core", "frames/s per core"):
        t.add_column(col, justify="right")
    for name, (wall, cpu) in best.items():
        t.add_row(name, f"{wall / a.clips:.2f}", f"{cpu / a.clips:.2f}", f"{a.clips / cpu:.3f}", f"{a.clips * F / cpu:.1f}")
    Console().print(t)
    (wt_wall, wt_cpu), (ff_wall, ff_cpu) = best.values()
    ratio = ff_cpu / wt_cpu  # (clips / wt_cpu) / (clips / ff_cpu)
    print(f"worldtune / ffmpeg clips per core: {ratio:.2f}x; PSNR (dB, RGB, mean over clips): {psnr_db}")
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "versions": versions(),
        "settings": {"clips": a.clips, "repeats": a.repeats, "preset": a.preset, "crf": a.crf, "frames": F,
                     "stride": S, "grid": [H, W], "cameras": "3 x 180x320 h264", "threads": 1,
                     "x264_params": REPRODUCIBLE_X264},
        "worldtune": {"wall_s_per_clip": wt_wall / a.clips, "cpu_s_per_clip": wt_cpu / a.clips,
                      "clips_per_cpu_s": a.clips / wt_cpu},
        "ffmpeg_xstack": {"wall_s_per_clip": ff_wall / a.clips, "cpu_s_per_clip": ff_cpu / a.clips,
                          "clips_per_cpu_s": a.clips / ff_cpu},
        "ratio_per_core": ratio, "psnr_db": psnr_db,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
