"""`worldtune prepare --cache`: prepare and cache in one pass, keeping only the clips still needed as video.

A user who trains from the cache never reads a training clip's mp4 again, yet `prepare` followed
by `cache` keeps every clip on disk. Streamed, each episode's clips are VAE-encoded into the cache
in the main process as soon as a prepare worker has written them (the workers keep encoding video
meanwhile), the first frame of every clip is saved as a PNG, and with `cache.keep_clips = "val"`
the mp4s of training clips are deleted once their latents are stored. What stays:

    clips/            held-out (val) clips (validation, generation inputs, ground truth for
                      evaluation) and the clips of the first `cache.previews` training episodes
    first_frames/     <clip_id>.png (or <clip_id>/<role>.png for separate views) of every clip:
                      image2world conditioning for any clip
    cache/<key>/      the ordinary cache folder (`worldtune.data.cache`), with its merged index

Which episodes are held out is decided when the manifest is written, from all kept episodes
(`prepare.assign_splits`). An episode is certainly a training episode once at least `val_count`
(of every planned episode) kept episodes come before it in the hold-out order: only then are its
clips deleted, so a held-out clip is never lost; the rest are settled at the end. The peak disk use
is therefore the kept clips plus about as many undecided ones.

Kill-safety: an episode's latents shard is written (atomically) before its done-record, and its
mp4s are deleted only after; a done-record whose mp4s are gone counts as done when the cache holds
the clip. A rerun resumes, and removes mp4s a killed run left behind. One process: the VAE runs on
one device (for many GPUs, run `prepare`, then `cache` under torchrun).
"""

from __future__ import annotations

import bisect
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.atomic import atomic_write_bytes, atomic_write_json
from worldtune.config import ACTION_TASKS
from worldtune.data import cache as C
from worldtune.data import prepare as P
from worldtune.errors import DatasetError
from worldtune.lock import OutputLock

FIRST_FRAMES = "first_frames"


def first_frame_paths(row: dict[str, Any]) -> dict[str, str]:
    """role (or '' for a packed clip) -> relative PNG path of the clip's first frame."""
    if row.get("views"):
        return {role: f"{FIRST_FRAMES}/{row['clip_id']}/{role}.png" for role in json.loads(row["views"])}
    return {"": f"{FIRST_FRAMES}/{row['clip_id']}.png"}


def _write_first_frames(root: Path, row: dict[str, Any]) -> None:
    import cv2

    from worldtune.data.video import read_frames

    views = json.loads(row["views"]) if row.get("views") else {"": row["video"]}
    for role, png in first_frame_paths(row).items():
        frame = read_frames(root / views[role], [0])[0]
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(frame[:, :, ::-1]))
        if not ok:
            raise DatasetError(f"{root / views[role]}: cannot encode its first frame as PNG")
        atomic_write_bytes(root / png, buf.tobytes())


class CacheSink:
    """Encodes each finished episode into the cache and deletes the mp4s no longer needed (a prepare EpisodeSink)."""

    def __init__(self, root: Path, pcfg, encode_row, keys_of, writer: C.ShardWriter, have: set[str], keep_all: bool,
                 previews: int):
        self.root, self.pcfg, self.encode_row, self.keys_of = root, pcfg, encode_row, keys_of
        self.writer, self.have, self.keep_all, self.n_previews = writer, have, keep_all, previews
        self.failed: dict[str, str] = {}
        self.deleted = 0
        self.previews: set[int] = set()
        self._kept: list[str] = []  # split ranks of kept episodes, sorted
        self._pending: dict[int, list[dict]] = {}  # kept episodes whose split is not yet certain
        self._max_val = 0

    def has(self, row: dict[str, Any]) -> bool:
        return all(k(row) in self.have for k in self.keys_of)

    def begin(self, jobs: list[P.EpisodeJob], records: dict[int, dict]) -> None:
        self._max_val = P.val_count(len(jobs), self.pcfg.val_fraction)
        self.previews = set(sorted(j.episode_index for j in jobs)[:self.n_previews])
        for e, rec in records.items():
            if not rec["dropped"]:
                self._note_kept(e, rec["rows"])
        self._sweep()

    def take(self, rec: dict) -> None:
        if not rec["dropped"]:
            self.encode(rec["rows"], progress=False)
            self._note_kept(rec["episode_index"], rec["rows"])
            self._sweep()

    def encode(self, rows: list[dict], progress: bool = True) -> None:
        """First frames, then latents (one shard) of the clips not yet cached: a cached clip has its PNGs."""
        todo = []
        for r in rows:
            if self.has(r):
                continue
            try:
                _write_first_frames(self.root, r)
                todo.append(r)
            except DatasetError as e:
                self.failed[r["clip_id"]] = str(e)
        rows = todo
        done = C.encode_clips(rows, self.encode_row, self.writer, batch_size=max(1, len(rows)), progress=progress)
        self.failed.update(done.failed)
        for r in rows:
            if r["clip_id"] not in done.failed:
                self.have.update(k(r) for k in self.keys_of)

    def _note_kept(self, episode: int, rows: list[dict]) -> None:
        bisect.insort(self._kept, P.split_rank(self.pcfg.seed, episode))
        self._pending[episode] = rows

    def _sweep(self) -> None:
        """Delete the clips of every pending episode that is now certainly a training one."""
        for e in list(self._pending):
            if bisect.bisect_left(self._kept, P.split_rank(self.pcfg.seed, e)) >= self._max_val:
                self.drop_clips(e, self._pending.pop(e))

    def drop_clips(self, episode: int, rows: list[dict]) -> None:
        """Remove a training episode's mp4s whose latents are cached (unless kept as previews or all kept)."""
        if self.keep_all or episode in self.previews:
            return
        for r in rows:
            if self.has(r):
                for f in P.clip_files(r):
                    path = self.root / f
                    if path.is_file():
                        path.unlink()
                        self.deleted += 1
                if r.get("views"):
                    try:
                        (self.root / "clips" / r["clip_id"]).rmdir()
                    except OSError:
                        pass


def run(cfg, *, on_clip: P.ClipHook | None = None) -> dict[str, Any]:
    """Prepare `cfg.prepare.source` into `cfg.prepare.out` and cache it with `cfg.model` in one pass.

    `on_clip` is prepare's hook (called as each clip mp4 is written; tests use it)."""
    from worldtune.data.dataset import read_dataset

    if cfg.train.task in ACTION_TASKS:
        from worldtune.errors import ConfigError

        raise ConfigError(f"`prepare --cache` caches video latents only: for train.task = \"{cfg.train.task}\" run "
                          "`worldtune prepare` without --cache, then `worldtune cache` with the same config")
    t0 = time.perf_counter()
    pcfg, ccfg = cfg.prepare, cfg.cache
    root = Path(pcfg.out)
    layout = P.build_layout(pcfg)
    C.check_model_size(cfg, pcfg.height, pcfg.width, layout.to_dict(), "prepare.height/width is", "use")
    shape = {"height": pcfg.height, "width": pcfg.width, "num_frames": pcfg.num_frames, "layout": layout.to_dict()}
    enc = C.load_encoder(cfg)
    encode_row, keys_of, extra = C.row_encoder(root, shape, enc.pipe.vae)
    out = C.open_cache(cfg, enc, root, shape, extra)
    with OutputLock(out, "cache", name=".worldtune-rank0.lock"):
        writer = C.ShardWriter(out, 0, enc.store)
        writer.remove_stale_temps()
        C.start_rank(out, 0)
        sink = CacheSink(root, pcfg, encode_row, keys_of, writer, C.LatentCache(out).clip_ids,
                         ccfg.keep_clips == "all", ccfg.previews)
        P.run(pcfg, sink=sink, on_clip=on_clip)
        info, rows = read_dataset(root)
        sink.encode(rows)  # clips an earlier plain `prepare` wrote into this folder
        for r in rows:  # settle what streaming could not: the held-out episodes are now known
            if r["split"] == "train":
                sink.drop_clips(r["episode_index"], [r])
        batches = C.prompt_batches([r["prompt"] for r in rows] + [""], ccfg.text_batch_size)
        new_prompts = C.encode_texts(enc.pipe, enc.spec, batches, enc.text_kind, C.LatentCache(out).prompt_keys,
                                     writer, info)
        C.finish_rank(out, 0, 1, sink.failed)
    train_eps = {r["episode_index"] for r in rows if r["split"] == "train"}
    info["streamed"] = {"cache": str(out), "keep_clips": ccfg.keep_clips, "first_frames": FIRST_FRAMES,
                        "preview_episodes": sorted(sink.previews & train_eps) if ccfg.keep_clips == "val" else []}
    atomic_write_json(root / "info.json", info, indent=2)
    summary = {"dataset": str(root), "cache": str(out), "clips": len(rows), "cached": sum(sink.has(r) for r in rows),
               "failed": len(sink.failed), "clip files deleted": sink.deleted,
               "clips kept as mp4": sum(all((root / f).is_file() for f in P.clip_files(r)) for r in rows),
               "new_prompts": new_prompts, "vae_mode": enc.vae_mode, "device": enc.device,
               "seconds": round(time.perf_counter() - t0, 1)}
    C.print_summary(summary, sink.failed)
    return summary

