"""A small demo dataset, an IDM trained on it, and generation folders made from its episodes.

The "generated" videos are real demo episodes packed into the 2x2 grid and split back, written in
the format of `worldtune generate` (worldtune.infer.records), so the IDM's labels can be checked
against the episodes' true actions and the export against the views' frames.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worldtune.config import load_config
from worldtune.data.layout import GridLayout
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.video import write_video
from worldtune.scene.writer import write_demo_dataset

H, W = 48, 80  # source frames; the IDM and the grid cells are 32x56 (the demo's)
CAMERAS = {"exterior_1": "observation.images.exterior_1_left", "exterior_2": "observation.images.exterior_2_left",
           "wrist": "observation.images.wrist_left"}
# the test IDM: smaller than the defaults so that training takes seconds (measured on the demo scene:
# held-out normalised MSE 0.31 vs 1.03 for the mean action, a 70% reduction, in 150 steps)
IDM_ARGS = ("--idm.steps", "150", "--idm.view_height", "24", "--idm.view_width", "40")


@pytest.fixture(scope="session")
def demo_lerobot(tmp_path_factory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("idm") / "lerobot", episodes=14, height=H, width=W, workers=1)


def idm_config(dataset: Path, out: Path, *extra: str):
    return load_config(None, ["--idm.dataset", str(dataset), "--idm.out", str(out), "--idm.log_every", "10", *extra])


@pytest.fixture(scope="session")
def trained_idm(demo_lerobot, tmp_path_factory) -> tuple[Path, dict]:
    """(run folder, summary) of the IDM trained on the demo dataset, as `worldtune idm train` does it."""
    from worldtune.idm.train import run

    out = tmp_path_factory.mktemp("idm_run") / "run"
    return out, run(idm_config(demo_lerobot, out, *IDM_ARGS))


def make_generations(dataset: Path, out: Path, episodes: list[int], seeds=(0,), models=("lora",), fps: int = 15,
                     split_views: bool = True) -> Path:
    """A generation folder whose videos are the given episodes of `dataset`, packed in the demo grid."""
    ds = LeRobotDataset(dataset)
    layout = GridLayout(height=64, width=112)
    out.mkdir(parents=True)
    (out / "info.json").write_text(json.dumps({"format": "worldtune.generations", "version": 1,
                                               "layout": layout.to_dict(), "fps": fps}))
    rows = []
    for model in models:
        for e in episodes:
            ep = ds.episodes[e]
            grid = layout.pack({r: ds.episode_frames(ep, k) for r, k in CAMERAS.items()})
            for seed in seeds:
                name, stem = f"clip{e:03d}", f"clip{e:03d}_s{seed}"
                video = f"{model}/{stem}.mp4"
                views = {r: f"{model}/{stem}/{r}.mp4" for r in CAMERAS} if split_views else {}
                for r, tile in layout.split(grid).items():
                    if split_views:
                        write_video(out / views[r], np.ascontiguousarray(tile), fps)
                write_video(out / video, grid, fps)
                rows.append({"model": model, "name": name, "seed": seed, "prompt": f"A robot {ep.task}",
                             "instruction": ep.task, "video": video, "views": views, "ground_truth": None,
                             "fps": fps, "num_frames": len(grid), "adapter": None if model == "base" else f"/x/{model}",
                             "params_hash": f"h{model}{e}{seed}"})
    (out / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out
