"""Datasets where users keep them: a snapshot in the Hugging Face hub cache (every file a relative link into the
repo's `blobs/`), a dataset folder that is itself a link, and a folder of it linked in from a shared drive. Links
the user (or the hub client) made are followed; a name inside the dataset's own files that climbs out (`..`, an
absolute path) is still refused, even when it would reach a real file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from worldtune.config import PrepareConfig
from worldtune.data import prepare as prep
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.video import read_frames
from worldtune.errors import DatasetError

REPO, REV = "lab/demo", "0123456789abcdef0123456789abcdef01234567"
WRIST = "observation.images.wrist_left"


def _blob_name(data: bytes, lfs: bool) -> str:
    """The blob's file name in the hub cache: the sha256 of an LFS file, the git object id of any other file."""
    return hashlib.sha256(data).hexdigest() if lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_snapshot(src: Path, cache: Path) -> Path:
    """`src` as huggingface_hub keeps a downloaded dataset repo in its cache: the content under
    `datasets--lab--demo/blobs/<hash>`, each file of `snapshots/<rev>/` a relative symbolic link to its blob
    (`../../blobs/<hash>` with one more `../` per folder level), `refs/main` naming the revision. Returns the
    snapshot folder, the path a user gives as the dataset."""
    repo = cache / f"datasets--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / REV
    (repo / "blobs").mkdir(parents=True)
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        data = f.read_bytes()
        blob = repo / "blobs" / _blob_name(data, lfs=f.suffix in (".mp4", ".parquet"))
        blob.write_bytes(data)
        link = snapshot / f.relative_to(src)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    return snapshot


@pytest.fixture
def snapshot(v3_root, tmp_path) -> Path:
    from huggingface_hub import scan_cache_dir

    snap = hub_snapshot(v3_root, tmp_path / "hub")
    scanned = scan_cache_dir(tmp_path / "hub")  # huggingface_hub reads it as one of its own caches
    assert not scanned.warnings, scanned.warnings
    (repo,) = scanned.repos
    (revision,) = repo.revisions
    assert (repo.repo_id, repo.repo_type, revision.commit_hash, revision.refs) == (REPO, "dataset", REV, {"main"})
    assert revision.nb_files == sum(1 for p in v3_root.rglob("*") if p.is_file())
    video = next(snap.joinpath("videos").rglob("*.mp4"))
    assert video.is_symlink() and not Path(os.readlink(video)).is_absolute()
    return snap


def _same_episodes(a: LeRobotDataset, b: LeRobotDataset) -> None:
    assert [(e.index, e.length, e.tasks, sorted(e.spans)) for e in a.episodes] == \
        [(e.index, e.length, e.tasks, sorted(e.spans)) for e in b.episodes]
    assert all(len(e.spans) == 3 for e in a.episodes)
    for ea, eb in zip(a.episodes, b.episodes):
        last = ea.length - 1
        assert (a.episode_frames(ea, WRIST, [0, last]) == b.episode_frames(eb, WRIST, [0, last])).all()


def test_a_hub_cache_snapshot_reads_and_prepares_like_the_folder(v3_root, snapshot, tmp_path):
    _same_episodes(LeRobotDataset(snapshot), LeRobotDataset(v3_root))
    runs = {}
    for name, src in (("folder", v3_root), ("hub", snapshot)):
        cfg = PrepareConfig(source=str(src), out=str(tmp_path / name), height=32, width=56, num_frames=17, workers=1)
        runs[name] = prep.run(cfg, quiet=True)["counts"]
    assert runs["hub"] == runs["folder"] and runs["hub"]["clips"] == 4
    rows = {n: pq.read_table(tmp_path / n / "manifest.parquet").to_pylist() for n in runs}
    assert [r["clip_id"] for r in rows["hub"]] == [r["clip_id"] for r in rows["folder"]]
    for r in rows["hub"]:
        assert (read_frames(tmp_path / "hub" / r["video"]) == read_frames(tmp_path / "folder" / r["video"])).all()


def test_a_linked_dataset_folder_with_a_linked_in_shared_drive(v3_root, tmp_path):
    """The dataset folder is a link (`~/data/ds -> /lab/ds`), and its videos folder a link to a shared drive."""
    real = Path(shutil.copytree(v3_root, tmp_path / "lab" / "ds"))
    drive = tmp_path / "mnt" / "shared"
    drive.mkdir(parents=True)
    shutil.move(real / "videos", drive / "videos")
    (real / "videos").symlink_to(drive / "videos", target_is_directory=True)
    (tmp_path / "home").mkdir()
    linked = tmp_path / "home" / "ds"
    linked.symlink_to(real, target_is_directory=True)
    _same_episodes(LeRobotDataset(linked), LeRobotDataset(v3_root))


@pytest.mark.parametrize("template", ["climb", "absolute"])
def test_a_name_in_the_dataset_that_climbs_out_is_still_refused(snapshot, template):
    """`video_path` in info.json naming a real video by climbing out of the snapshot into blobs/ (or by its absolute
    path): refused in one line, though the file exists and the links the hub made are followed."""
    blob = Path(os.path.realpath(next(snapshot.joinpath("videos").rglob("*.mp4"))))
    info_link = snapshot / "meta" / "info.json"
    info = json.loads(info_link.read_text())
    info["video_path"] = f"../../blobs/{blob.name}" if template == "climb" else str(blob)
    info_link.unlink()  # the user's edit replaces the link with a file, as an editor saving it would
    info_link.write_text(json.dumps(info))
    assert (snapshot / info["video_path"]).is_file()  # the name reaches a real file
    with pytest.raises(DatasetError, match=r"info.json video_path: .*(points outside|not a relative path)") as e:
        LeRobotDataset(snapshot).episodes
    assert "\n" not in str(e.value)
