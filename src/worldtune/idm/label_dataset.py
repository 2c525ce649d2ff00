"""Label videos that have no actions (another robot's LeRobot dataset, a folder of human or phone videos)
with worldtune's IDM and write them as a LeRobot v3.0 dataset: `worldtune trajectories` with
`trajectories.source` set, instead of a generation folder.

This is how DreamGen-style pipelines grow a policy's data beyond teleoperation: any video of the task
becomes an episode whose actions are the IDM's labels (pseudo-actions). The source is read as `prepare`
reads it: LeRobot v2.0/v2.1/v3.0 (`meta/info.json`), or a plain folder (`videos/*.mp4`, with the task
of `videos/X.mp4` in `metas/X.txt`; one camera, named `video`).

Cameras: each of the IDM's camera roles is read from the source camera the IDM was trained on if the
source has it, else from `idm.cameras[role]` (set it to map another robot's camera keys), else, for a
one-camera IDM and a one-camera source, from that camera. Frames are written at the first episode's
size (later episodes of another size are resized with the IDM's own resize policy); the IDM sees them
as in training. Each episode records `source/dataset`, `source/episode_index`, `source/name` and
`source/actions` = "idm" (labels, not recorded actions); `is_synthetic` is false (the videos are real).
An episode that cannot be decoded is skipped and counted. Written into `.<out>.partial`, renamed when
complete, as the generated-video export is.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.atomic import atomic_write_bytes
from worldtune.data.layout import resize_frames
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.lerobot_writer import LeRobotWriter, VideoEncoding
from worldtune.errors import ConfigError, DatasetError
from worldtune.idm.label import ActionLabeler

PROVENANCE = "meta/worldtune_trajectories.json"  # how the dataset was made (every trajectories output)


def camera_map(labeler: ActionLabeler, source: LeRobotDataset, mapping: dict[str, str]) -> dict[str, str]:
    """IDM role -> source camera key (see the module doc); a one-line error naming both sides otherwise."""
    trained: dict[str, str] = dict(labeler.meta["cameras"])
    keys = list(source.cameras)
    out = {}
    for role in labeler.roles:
        if trained.get(role) in source.cameras:
            out[role] = trained[role]
        elif mapping.get(role) in source.cameras:
            out[role] = mapping[role]
        elif len(labeler.roles) == 1 and len(keys) == 1:
            out[role] = keys[0]
        else:
            raise DatasetError(f"{source.root} has cameras {keys}; the IDM reads {labeler.roles} (trained on "
                               f"{list(trained.values())}): map each role to one of the source's cameras with "
                               f"--idm.cameras '{{{role} = \"{keys[0] if keys else 'KEY'}\", ...}}'")
    return out


def whole_fps(source: LeRobotDataset) -> int:
    """The source's frame rate as LeRobot writes it (a whole number)."""
    fps = source.fps
    if not fps or abs(fps - round(fps)) > 1e-3:
        raise DatasetError(f"{source.root}: frame rate {fps} is not a whole number of frames per second, which a "
                           "LeRobot v3.0 dataset needs: re-encode the videos at a whole fps")
    return int(round(fps))


def _write_episode(writer: LeRobotWriter, labeler: ActionLabeler, keys: dict[str, str], task: str,
                   frames: dict[str, np.ndarray], columns: dict[str, Any]) -> str | None:
    """Label one episode's frames (at the dataset's size) and add it; why it was skipped, or None."""
    frames = {k: resize_frames(f, *writer.cameras[k], labeler.resize) for k, f in frames.items()}
    n = min(len(f) for f in frames.values())
    if n < 2:
        return "fewer than 2 frames"
    actions = labeler.label({role: frames[key][:n] for role, key in keys.items()})[:n]
    writer.add_episode({k: f[:n] for k, f in frames.items()}, np.asarray(actions, np.float32), task, False, columns)
    return None


def run(cfg: Any) -> dict[str, Any]:
    """Label every episode of `trajectories.source` with the IDM at `trajectories.idm`; returns the summary."""
    from worldtune.console import Progress, setting_up

    tc = cfg.trajectories
    if tc.labeller != "idm":
        raise ConfigError("trajectories.source is labelled by worldtune's IDM: set trajectories.labeller = \"idm\" "
                          "(Cosmos 3's inverse dynamics labels generation folders)")
    for_generations = [k for k in ("models", "evaluation", "thresholds", "merge_with") if getattr(tc, k)]
    if for_generations:
        raise ConfigError(f"trajectories.{', trajectories.'.join(for_generations)} select and score generated videos: "
                          "unset them with trajectories.source")
    out = Path(tc.out)
    if out.exists():
        raise DatasetError(f"{out} already exists: trajectories.out must name a new folder (delete it or choose another)")
    source = LeRobotDataset(tc.source)
    with setting_up("trajectories", f"loading the IDM {tc.idm}"):
        labeler = ActionLabeler.load(tc.idm, tc.device, cfg.idm.label_batch)
    keys = camera_map(labeler, source, dict(cfg.idm.cameras))
    fps = whole_fps(source)
    names = getattr(source, "names", {})  # a plain folder's video stems
    t0 = time.time()
    tmp = out.parent / f".{out.name}.partial"
    if tmp.exists():  # left by a killed run: start clean
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    writer: LeRobotWriter | None = None
    skipped: dict[str, int] = {}
    try:
        with Progress("trajectories", len(source.episodes), "episodes") as bar:
            for ep in source.episodes:
                why = None
                try:
                    frames = {key: source.episode_frames(ep, key) for key in set(keys.values())}
                except DatasetError as e:
                    why = str(e).split(": ", 1)[-1][:80]
                else:
                    if writer is None:
                        sizes = {k: (int(f.shape[1]), int(f.shape[2])) for k, f in frames.items()}
                        writer = LeRobotWriter(tmp, fps, sizes, labeler.action_names,
                                               VideoEncoding(tc.codec, tc.lossless, tc.crf, tc.gop),
                                               tc.episodes_per_file, tc.robot_type)
                    why = _write_episode(writer, labeler, keys, ep.task or "", frames,
                                         {"source/dataset": str(source.root.resolve()), "source/episode_index": ep.index,
                                          "source/name": names.get(ep.index, ""), "source/actions": "idm"})
                if why:
                    skipped[why] = skipped.get(why, 0) + 1
                bar.advance()
        if writer is None or not writer.episodes:
            raise DatasetError(f"{source.root}: no episode could be labelled (skipped: {skipped or 'none found'})")
        info = writer.finish()
        summary = {"out": str(out), "source": str(source.root.resolve()), "source_format": source.version,
                   "episodes": {"labelled": len(writer.episodes), "skipped": skipped}, "frames": info["total_frames"],
                   "fps": fps, "cameras": keys, "labeller": {"kind": "idm", "idm": str(Path(tc.idm).resolve())},
                   "codec": tc.codec, "lossless": tc.lossless, "seconds": round(time.time() - t0, 2)}
        atomic_write_bytes(tmp / PROVENANCE, (json.dumps(summary, indent=1) + "\n").encode())
    except BaseException:
        if writer is not None:
            writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(out)
    from worldtune.console import summary_table

    summary_table("worldtune trajectories (labelled by the IDM)",
                  {"dataset": summary["out"], "source": summary["source"], "labelled episodes": len(writer.episodes),
                   "skipped": sum(skipped.values()), "frames": summary["frames"], "fps": fps,
                   "cameras": ", ".join(f"{r} <- {k}" for r, k in keys.items()), "seconds": summary["seconds"]})
    for why, n in skipped.items():
        print(f"  skipped {n} episode(s): {why}")
    return summary
