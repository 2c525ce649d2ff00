"""`worldtune trajectories`: generated videos + an IDM -> a policy-ready LeRobot v3.0 dataset.

Reads top to bottom:
1. the generation folder (`worldtune generate`'s info.json + generations.jsonl; its baseline rows, the first
   frame held and the real clip through the VAE, are not generated videos and are left out, counted) and the
   labeller:
   worldtune's IDM (`trajectories.labeller = "idm"`; the folder's cameras must be the IDM's) or Cosmos 3's
   inverse dynamics (`"cosmos3"`, worldtune.idm.cosmos3; it labels the packed video, and is compared with
   the IDM on the prepared dataset's held-out clips, worldtune.idm.compare); check every video exists;
2. optional evaluation scores (`worldtune evaluate`'s results.json + videos.jsonl) and thresholds:
   keep only the videos that pass;
3. write into `.<out>.partial` next to `out`: the real episodes of `merge_with` first (actions as
   recorded, `is_synthetic = false`), then one episode per generated video: each camera's view
   decoded once, labelled by the IDM, and re-encoded from the decoded frames as they are
   (lossless by default, so the dataset's frames are the generated frames);
4. rename the folder to `out`. A killed run leaves only the `.partial` folder, which the next
   run deletes and rewrites (a clean restart: labelling costs less than generating). A run holds
   `.<out>.lock` beside `out` throughout, so a second run into the same folder is refused in one line.

Names read from files become paths only through `worldtune.names`: the IDM's camera keys (folder names of
the written dataset) are made safe names, and the videos generations.jsonl lists are read only inside the
generation folder.

Each episode carries columns a user filters by: `is_synthetic`, `source/model`, `source/adapter`,
`source/seed`, `source/prompt`, `source/params_hash` (and the input's name and video), and
`score/<metric>` for every metric of the evaluation. The format is in docs/trajectories.md.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from worldtune.config import TrajectoriesConfig, WorldtuneConfig
from worldtune.data.layout import resize_frames
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.lerobot_writer import LeRobotWriter, VideoEncoding
from worldtune.errors import ConfigError, DatasetError
from worldtune.idm.data import action_names, check_cameras, read_actions
from worldtune.idm.cosmos3 import Cosmos3Labeler
from worldtune.idm.label import ActionLabeler
from worldtune.idm.label_dataset import PROVENANCE
from worldtune.infer.views import layout_roles
from worldtune.lock import OutputLock
from worldtune.names import inside, safe_names

SOURCE_COLUMNS = ("model", "adapter", "seed", "prompt", "params_hash", "name", "video")


# -------------------------------------------------------------------------------------- inputs
def read_generations(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """info.json and the rows of a generation folder (its generated videos and its baselines; the real clips
    have no rows)."""
    from worldtune.eval.evaluate import read_generation_folder
    from worldtune.errors import EvaluationError

    try:
        info, rows = read_generation_folder(folder)
    except EvaluationError as e:
        raise DatasetError(str(e).replace("evaluate.runs", "trajectories.generations")) from None
    return info, sorted(rows, key=lambda r: (str(r["model"]), str(r["name"]), int(r.get("seed") or 0)))


def camera_roles(info: dict[str, Any], labeler: ActionLabeler, folder: Path) -> list[str]:
    """The roles of the generated cameras; they must be the IDM's."""
    layout = info.get("layout")
    roles = layout_roles(layout)
    if not roles:  # one camera: the video itself
        if len(labeler.roles) != 1:
            raise DatasetError(f"{folder / 'info.json'}: the videos have one camera but the IDM was trained on "
                               f"{labeler.roles}: label them with an IDM trained on the same cameras")
        return list(labeler.roles)
    if sorted(roles) != sorted(labeler.roles):
        raise DatasetError(f"{folder / 'info.json'}: the videos' cameras {roles} are not the IDM's {labeler.roles}: "
                           f"train the IDM with idm.cameras naming the layout's roles")
    return roles


def view_files(row: dict[str, Any], roles: list[str], folder: Path, layout: dict[str, Any] | None) -> dict[str, Path]:
    """{role: mp4} of one generated video; a multi-camera layout needs the per-camera views."""
    key = f"{row['model']}/{row['name']}/s{row.get('seed')}"
    where = f"{folder / 'generations.jsonl'} ({key})"
    if not layout_roles(layout):
        files = {roles[0]: inside(folder, row["video"], f"{where} video")}
    else:
        views = row.get("views") or {}
        missing = [r for r in roles if r not in views]
        if missing:
            raise DatasetError(f"{folder / 'generations.jsonl'}: {key} has no camera views {missing} for its "
                               f"{layout.get('type')} layout: regenerate with generate.split_views = true")
        files = {r: inside(folder, views[r], f"{where} views") for r in roles}
    for f in files.values():
        if not f.is_file():
            raise DatasetError(f"{f} is missing ({key} in {folder / 'generations.jsonl'}): the generation folder is "
                               f"incomplete; rerun `worldtune generate` on it (it resumes)")
    return files


def read_scores(folder: Path, generations: Path) -> tuple[list[str], set[str], dict[tuple, dict[str, Any]]]:
    """(metric names, lower-is-better names, (model, name, seed) -> {metric: score}) of an evaluation folder.

    Metrics are the names results.json lists; rows of other generation folders are ignored, and a
    label the evaluation qualified with the folder name ("<folder>/<label>") is matched as well.
    """
    res_path, rows_path = folder / "results.json", folder / "videos.jsonl"
    if not res_path.is_file() or not rows_path.is_file():
        raise DatasetError(f"{folder} is not an evaluation folder (needs results.json and videos.jsonl): "
                           f"run `worldtune evaluate` on {generations} first")
    results = json.loads(res_path.read_text(encoding="utf-8"))
    metrics = [str(m) for m in results.get("metrics") or []]
    lower = set(results.get("lower_is_better") or [])
    scores: dict[tuple, dict[str, Any]] = {}
    here = str(generations.resolve())
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("reference") or (r.get("run") and str(Path(r["run"]).resolve()) != here):
            continue
        model = str(r["model"]).removeprefix(f"{generations.name}/")
        scores[(model, str(r["name"]), r.get("seed"))] = {m: r.get(m) for m in metrics}
    return metrics, lower, scores


def passes(score: dict[str, Any], thresholds: dict[str, float], lower: set[str]) -> str | None:
    """None if every thresholded metric passes, else the first failing metric's name."""
    for m, bound in thresholds.items():
        v = score.get(m)
        if v is None or not np.isfinite(v) or (v > bound if m in lower else v < bound):
            return m
    return None


def decode(path: Path) -> list[av.VideoFrame]:
    """Every frame of a video as decoded (yuv), for encoding unchanged; `to_ndarray("rgb24")` gives
    the RGB that worldtune's reader (data/video.py) returns for the same file."""
    try:
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            s.thread_type = "AUTO"
            return list(c.decode(s))
    except (av.error.FFmpegError, IndexError) as e:
        raise DatasetError(f"video {path} cannot be decoded ({e}): regenerate it") from None


# ---------------------------------------------------------------------------------------- stage
class TrajectoryExport:
    def __init__(self, cfg: WorldtuneConfig) -> None:
        self.tc: TrajectoriesConfig = cfg.trajectories
        tc = self.tc
        self.out = Path(tc.out)
        if self.out.exists():
            raise DatasetError(f"{self.out} already exists: trajectories.out must name a new folder "
                               f"(delete it or choose another)")
        self.folder = Path(tc.generations)
        self.cfg = cfg
        self.info, rows = read_generations(self.folder)
        self.layout = self.info.get("layout")
        self.labeler: ActionLabeler | Cosmos3Labeler
        if tc.labeller == "idm":
            self.labeler = idm = ActionLabeler.load(tc.idm, tc.device, cfg.idm.label_batch)
            self.roles = camera_roles(self.info, idm, self.folder)
            # role -> dataset camera key: a folder name of the written dataset, so made safe
            self.keys = safe_names({r: idm.meta["cameras"][r] for r in self.roles}, f"{tc.idm} idm.json cameras")
            self.action_key, self.resize = idm.meta["action_key"], idm.meta.get("resize", "pad")
            self.robot_type, self.trained_on = idm.meta["dataset"].get("robot_type"), idm.meta["dataset"]["path"]
        else:
            cameras = prepared_cameras(tc.cosmos3.dataset or self.info.get("dataset"))
            self.roles = layout_roles(self.layout) or list(cameras)[:1]
            self.keys = safe_names({r: cameras.get(r, f"observation.images.{r}") for r in self.roles},
                                   "the prepared dataset's info.json cameras")
        self.rows = self._select(rows)
        self.files = [view_files(r, self.roles, self.folder, self.layout) for r in self.rows]
        self.fps = self._fps()
        if tc.labeller == "cosmos3":
            from worldtune.console import setting_up
            from worldtune.idm.cosmos3 import load_cosmos3_labeler

            with setting_up("trajectories", "loading the Cosmos 3 labeller"):
                self.labeler = c3 = load_cosmos3_labeler(cfg, self.info.get("dataset"), self.fps)
            self.action_key, self.resize, self.robot_type = c3.action_key, str(self.layout.get("resize", "pad")
                                                                               if self.layout else "pad"), None
            self.trained_on = str(Path(tc.cosmos3.dataset or self.info.get("dataset")))
        self.metrics, self.lower, self.scores = ([], set(), {})
        if tc.evaluation:
            self.metrics, self.lower, self.scores = read_scores(Path(tc.evaluation), self.folder)
        unknown = [m for m in tc.thresholds if m not in self.metrics]
        if unknown:
            raise ConfigError(f"trajectories.thresholds names {unknown}, which "
                              + (f"{tc.evaluation}/results.json does not list (it has {self.metrics})"
                                 if tc.evaluation else "needs trajectories.evaluation (an evaluation folder)"))
        self.real = LeRobotDataset(tc.merge_with) if tc.merge_with else None
        if self.real is not None:
            self._check_real(self.real)

    def _select(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The generated videos to label: baselines (infer/baselines.py) are no model's videos and never become
        trajectories (counted in `self.baselines_skipped`); `trajectories.models` picks among the rest."""
        self.baselines_skipped = sum(bool(r.get("baseline")) for r in rows)
        rows = [r for r in rows if not r.get("baseline")]
        models = sorted({str(r["model"]) for r in rows})
        unknown = [m for m in self.tc.models if m not in models]
        if unknown:
            raise ConfigError(f"trajectories.models names {unknown}, not in {self.folder / 'generations.jsonl'} "
                              f"(its generated models are {models}; baselines are never labelled)")
        picked = [r for r in rows if not self.tc.models or str(r["model"]) in self.tc.models]
        if not picked:
            raise DatasetError(f"{self.folder / 'generations.jsonl'} lists no generated videos")
        return picked

    def _fps(self) -> int:
        """The written videos' true fps (their header), which must be a whole number for LeRobot."""
        from worldtune.data.video import probe

        first = next(iter(self.files[0].values()))
        fps = probe(first).fps
        if abs(fps - round(fps)) > 1e-3:
            raise DatasetError(f"{first} runs at {fps:g} fps; LeRobot datasets need a whole number: "
                               f"generate with generate.fps set to an integer")
        return int(round(fps))

    def _check_real(self, real: LeRobotDataset) -> None:
        names = action_names(real, self.action_key)
        if names != self.labeler.action_names:
            raise DatasetError(f"{real.root / 'meta' / 'info.json'}: actions {names} are not the labeller's "
                               f"{self.labeler.action_names} (from {self.trained_on}): merge with the dataset the "
                               f"labeller's actions come from, or train an IDM on this one")
        check_cameras(real, self.keys)
        if real.fps is None or abs(real.fps - self.fps) > 1e-3:
            raise DatasetError(f"{real.root / 'meta' / 'info.json'}: {real.fps} fps, the generated videos run at "
                               f"{self.fps} fps: one dataset holds one fps; generate with generate.fps = {real.fps}")

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        """Write the dataset, holding `.<out>.lock` beside it: a second run into the same folder is refused in one
        line rather than deleting the first one's `.partial` folder under it."""
        with OutputLock(self.out.parent, "trajectories", name=f".{self.out.name}.lock", guards=self.out):
            if self.out.exists():  # finished by another run since this one was set up
                raise DatasetError(f"{self.out} already exists: trajectories.out must name a new folder "
                                   f"(delete it or choose another)")
            return self._run()

    def _run(self) -> dict[str, Any]:
        t0 = time.time()
        tmp = self.out.parent / f".{self.out.name}.partial"
        if tmp.exists():  # left by a killed run (the lock says none is live): start clean
            shutil.rmtree(tmp)
        from worldtune.data.video import probe

        sizes = {self.keys[r]: (probe(f).height, probe(f).width) for r, f in self.files[0].items()}
        tc = self.tc
        writer = LeRobotWriter(tmp, self.fps, sizes, self.labeler.action_names,
                               VideoEncoding(tc.codec, tc.lossless, tc.crf, tc.gop), tc.episodes_per_file,
                               tc.robot_type or self.robot_type)
        dropped: dict[str, int] = {}
        try:
            real = self._write_real(writer, sizes) if self.real is not None else 0
            synthetic = 0
            from worldtune.console import Progress

            with Progress("trajectories", len(self.rows), "videos") as bar:
                for row, files in zip(self.rows, self.files):
                    key = (str(row["model"]), str(row["name"]), row.get("seed"))
                    score = self.scores.get(key, {})
                    failed = passes(score, tc.thresholds, self.lower)
                    if failed is not None:
                        dropped[failed] = dropped.get(failed, 0) + 1
                    else:
                        self._write_generated(writer, row, {r: decode(f) for r, f in files.items()}, score)
                        synthetic += 1
                    bar.advance()
            if not synthetic and not real:
                raise DatasetError(f"no trajectory passes trajectories.thresholds {dict(tc.thresholds)} "
                                   f"(failed per metric: {dropped}): relax them")
            info = writer.finish()
            summary = {"out": str(self.out), "episodes": {"real": real, "synthetic": synthetic},
                       "dropped_by_threshold": dropped, "baselines_skipped": self.baselines_skipped, "frames": info["total_frames"], "fps": self.fps,
                       "cameras": list(sizes), "codec": tc.codec, "lossless": tc.lossless,
                       "generations": str(self.folder.resolve()), "labeller": self._labeller_info(),
                       "idm": str(Path(tc.idm).resolve()) if tc.labeller == "idm" else None,
                       "evaluation": str(Path(tc.evaluation).resolve()) if tc.evaluation else None,
                       "thresholds": dict(tc.thresholds), "merge_with": str(self.real.root.resolve()) if self.real else None}
            if tc.labeller == "cosmos3" and tc.cosmos3.compare_clips:
                summary["labeller_comparison"] = self.compare()
            summary["seconds"] = round(time.time() - t0, 2)
            from worldtune.data.video import atomic_write_bytes

            atomic_write_bytes(tmp / PROVENANCE, (json.dumps(summary, indent=1) + "\n").encode())
        except BaseException:
            writer.abort()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        tmp.rename(self.out)
        return summary

    def _write_generated(self, writer: LeRobotWriter, row: dict[str, Any], frames: dict[str, list[av.VideoFrame]],
                         score: dict[str, Any]) -> None:
        rgb = {r: np.stack([f.to_ndarray(format="rgb24") for f in fr]) for r, fr in frames.items()}
        n = min(len(v) for v in rgb.values())
        task = row.get("instruction") or row.get("prompt") or ""
        if isinstance(self.labeler, ActionLabeler):
            actions = self.labeler.label({r: v[:n] for r, v in rgb.items()})
        else:  # Cosmos 3 sees the packed video it generates (the grid of cameras as one frame)
            from worldtune.data.video import read_frames

            packed = read_frames(inside(self.folder, row["video"], f"{self.folder / 'generations.jsonl'} video"))
            n = min(n, len(packed))
            actions = self.labeler.label_video(packed[:n], task)[:n]
        columns: dict[str, Any] = {f"source/{c}": row.get(c) for c in SOURCE_COLUMNS}
        columns.update({f"score/{m}": score.get(m) for m in self.metrics})
        writer.add_episode({self.keys[r]: fr[:n] for r, fr in frames.items()}, actions, task, True, columns)

    def _write_real(self, writer: LeRobotWriter, sizes: dict[str, tuple[int, int]]) -> int:
        """The real dataset's episodes, resized to the generated cameras' size (same resize as the IDM)."""
        real = self.real
        assert real is not None
        acts = read_actions(real, self.action_key)
        resize = self.resize
        n_written = 0
        for ep in real.episodes:
            if ep.index not in acts or any(k not in ep.spans for k in sizes):
                continue
            frames = {k: resize_frames(real.episode_frames(ep, k), h, w, resize) for k, (h, w) in sizes.items()}
            n = min(len(acts[ep.index]), *(len(f) for f in frames.values()))
            columns = {"source/model": "real", "source/dataset": str(real.root.resolve()),
                       "source/episode_index": ep.index}
            writer.add_episode({k: f[:n] for k, f in frames.items()}, acts[ep.index][:n], ep.task or "", False, columns)
            n_written += 1
        return n_written


    # ------------------------------------------------------------------ labellers
    def _labeller_info(self) -> dict[str, Any]:
        if isinstance(self.labeler, ActionLabeler):
            return {"kind": "idm", "idm": str(Path(self.tc.idm).resolve())}
        c3 = self.labeler
        return {"kind": "cosmos3", "model": c3.source, "domain": c3.domain.to_dict(), "normalization": c3.normalization,
                "chunk": c3.chunk, "tier": c3.tier, "view_point": c3.view_point, "steps": c3.steps,
                "guidance": c3.guidance, "seed": c3.seed, "dataset": self.trained_on, "output_rows": c3.output_rows,
                **({"note": c3.note} if c3.note else {})}

    def compare(self) -> dict[str, Any]:
        """Cosmos 3's inverse dynamics and the IDM (when trajectories.idm holds one for these cameras) on the
        prepared dataset's held-out clips: action MSE per entry and overall (worldtune.idm.compare)."""
        from worldtune.errors import CheckpointError
        from worldtune.idm.compare import compare_labellers
        from worldtune.infer.views import split_views

        c3 = self.labeler
        assert not isinstance(c3, ActionLabeler)
        labellers: dict[str, Any] = {"cosmos3": lambda clip: c3.label_video(clip.frames, str(clip.row.get("task") or ""))}
        note = None
        try:
            idm = ActionLabeler.load(self.tc.idm, self.tc.device, self.cfg.idm.label_batch)
            if sorted(idm.roles) != sorted(self.roles):
                raise DatasetError(f"the IDM's cameras {idm.roles} are not the dataset's {self.roles}")
            single = self.roles[0]
            labellers["idm"] = lambda clip: idm.label(split_views(clip.frames, self.layout) or {single: clip.frames})
        except (CheckpointError, DatasetError) as e:
            note = f"no IDM compared: {e}"
        result = compare_labellers(self.trained_on, labellers, self.tc.cosmos3.compare_clips)
        if note:
            result["note"] = note
        return result


def print_comparison(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    names = result["action_names"]
    table = Table(title=f"labellers on {len(result['clips'])} held-out clips ({result['transitions']} actions): "
                        "MSE per action entry")
    table.add_column("labeller")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column("overall", justify="right")
    table.add_column("normalised", justify="right")
    for name, row in result["labellers"].items():
        table.add_row(name, *[f"{row['mse'][n]:.3g}" for n in names], f"{row['mse_overall']:.3g}",
                      "—" if row["normalised_mse"] is None else f"{row['normalised_mse']:.3f}")
    Console().print(table)
    if result.get("note"):
        Console().print(f"  {result['note']}")


def prepared_cameras(dataset: str | None) -> dict[str, str]:
    """role -> camera key of a prepared dataset (its info.json), for the cosmos3 labeller's episode features."""
    path = Path(dataset) / "info.json" if dataset else None
    if path is None or not path.is_file():
        raise ConfigError(f"trajectories.labeller = \"cosmos3\" needs the prepared dataset the generations came from "
                          f"(actions, camera keys): set trajectories.cosmos3.dataset (got {dataset!r})")
    return {str(r): str(k) for r, k in (json.loads(path.read_text(encoding="utf-8")).get("cameras") or {}).items()}


def run(cfg: WorldtuneConfig) -> dict[str, Any]:
    """Entry point of `worldtune trajectories`."""
    from rich.console import Console

    if cfg.trajectories.source:  # videos without actions, not a generation folder
        from worldtune.idm.label_dataset import run as label_source

        return label_source(cfg)
    summary = TrajectoryExport(cfg).run()
    if summary.get("labeller_comparison"):
        print_comparison(summary["labeller_comparison"])
    e = summary["episodes"]
    Console().print(f"wrote LeRobot v3.0 dataset {summary['out']}: {e['synthetic']} synthetic + {e['real']} real "
                    f"episodes, {summary['frames']} frames at {summary['fps']} fps, cameras {summary['cameras']}"
                    + (f"; dropped by thresholds: {summary['dropped_by_threshold']}" if summary["dropped_by_threshold"] else "")
                    + (f"; {summary['baselines_skipped']} baseline row(s) left out (not generated videos)"
                       if summary["baselines_skipped"] else ""))
    return summary
