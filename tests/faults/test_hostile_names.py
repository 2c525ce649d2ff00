"""Every writer and reader that builds a path from a name read from a file, walked with hostile names.

A name from a dataset's info.json, an IDM's idm.json, a generations.jsonl or a request becomes at most one safe path
component inside the output folder (`names.safe_name`), and a relative path read from a file stays inside its
folder (`names.inside`): nothing is written or read outside, and a path that would leave is a one-line error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from worldtune.errors import DatasetError, WorldtuneError
from worldtune.names import MAX_LEN, safe_name

HOSTILE = ["../x", "../../../../x", "/tmp/abs_x", "a\0b", "x" * 400, ".", "..", "", "a/b/../../..", "~/x", "-",
           "videos/../../x", "C:\\x", "é/ü"]


def _written_outside(tmp_path: Path, folder: Path, before: set[Path]) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p not in before and folder not in p.parents and p != folder
            and p not in folder.parents and not p.name.endswith(".lock")]


@pytest.mark.parametrize("name", HOSTILE)
def test_safe_name_is_one_harmless_component(name):
    s = safe_name(name)
    assert s and "/" not in s and "\0" not in s and not s.startswith(".") and len(s) <= MAX_LEN
    assert safe_name(s) == s  # idempotent


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a\0b", "", "a/../../x", None, 7])
def test_inside_refuses_paths_that_leave_their_folder(tmp_path, name):
    from worldtune.names import inside

    with pytest.raises(DatasetError, match="generations.jsonl video") as e:
        inside(tmp_path, name, "generations.jsonl video")
    assert "\n" not in str(e.value)


def test_inside_follows_the_users_links_and_judges_the_name_as_written(tmp_path):
    """A link in the folder is the user's and is followed wherever it leads; a name is refused for what it says
    (`..` above the folder), and its `..` are folded before the path is used, so `link/..` is the folder itself."""
    from worldtune.names import inside

    (tmp_path / "in").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "clip.mp4").write_bytes(b"linked in")
    (tmp_path / "in" / "link").symlink_to(tmp_path / "elsewhere")
    assert inside(tmp_path / "in", "link/clip.mp4", "x").read_bytes() == b"linked in"
    assert inside(tmp_path / "in", "a/../b.mp4", "x") == tmp_path / "in" / "b.mp4"
    assert inside(tmp_path / "in", "link/../b.mp4", "x") == tmp_path / "in" / "b.mp4"  # not elsewhere's parent
    with pytest.raises(DatasetError, match="points outside"):
        inside(tmp_path / "in", "link/../../elsewhere/clip.mp4", "x")


# ---------------------------------------------------------------------------------------- serve record
@pytest.mark.parametrize("name", HOSTILE)
def test_serve_records_hostile_camera_keys_inside_the_record_folder(monkeypatch, tmp_path, name):
    from tests.faults.test_serve_faults import SIDE, chunk, frame, start_fake
    from worldtune.serve import Client

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "info.json").write_text(json.dumps({"cameras": {"image": name}, "height": SIDE, "width": SIDE}))
    before = set(tmp_path.rglob("*"))
    deep = tmp_path / "a" / "b" / "c"  # so that an escape of up to 4 levels stays where this test looks
    server, record = start_fake(monkeypatch, deep, dataset=dataset)
    try:
        client = Client(server.url)
        key = client.info()["camera_keys"]["image"]
        client.reset(frame(), "push", seed=0)
        client.step(chunk(0.1))
        recorded = Path(client.end().recorded)
    finally:
        server.shutdown()
        server.close()
    assert key == (safe_name(name) if name else "observation.images.image")  # an empty key: the default one
    assert _written_outside(tmp_path, record, before) == [] and not Path("/tmp/abs_x").exists()
    assert (recorded / "videos" / key).is_dir()


# ---------------------------------------------------------------------------------------- trajectories
@pytest.fixture(scope="module")
def small_generations(tmp_path_factory) -> tuple[Path, Path]:
    """(a 1-video generation folder of the demo's three cameras, the demo dataset)."""
    from tests.idm.conftest import make_generations
    from worldtune.scene.writer import write_demo_dataset

    base = tmp_path_factory.mktemp("hostile")
    ds = write_demo_dataset(base / "ds", episodes=2, height=32, width=48, workers=1, length=9)
    return make_generations(ds, base / "gen", [0]), ds


def _idm_with_cameras(folder: Path, cameras: dict[str, str]) -> Path:
    """An untrained IDM whose idm.json names `cameras` (role -> camera key): labels are noise, paths are what count."""
    from worldtune.idm.model import InverseDynamicsModel, architecture, save_idm

    model = InverseDynamicsModel(len(cameras), 5, 4, 4, 4)
    meta = {"architecture": architecture(model, 4, 16, 24), "cameras": cameras, "resize": "pad", "action_key": "action",
            "action_names": [f"a{i}" for i in range(4)], "action_mean": [0.0] * 4, "action_std": [1.0] * 4,
            "gripper": None, "fps": 15, "step": 0, "dataset": {"path": "x", "robot_type": None, "episodes": 2}}
    return save_idm(folder, model, meta)


def _export(gen: Path, idm: Path, out: Path):
    from worldtune.config import load_config
    from worldtune.trajectories import TrajectoryExport

    return TrajectoryExport(load_config(None, ["--trajectories.generations", str(gen), "--trajectories.idm", str(idm),
                                               "--trajectories.out", str(out), "--trajectories.device", "cpu"]))


@pytest.mark.parametrize("name", ["../../../../x", "/tmp/abs_x", "x" * 400, ".", "", "a\0b"])
def test_trajectories_writes_hostile_idm_camera_keys_inside_out(small_generations, tmp_path, name):
    gen, _ = small_generations
    idm = _idm_with_cameras(tmp_path / "idm", {"exterior_1": name, "exterior_2": "observation.images.b",
                                               "wrist": "observation.images.c"})
    out = tmp_path / "a" / "b" / "c" / "out"  # so that an escape of up to 4 levels stays where this test looks
    before = set(tmp_path.rglob("*"))
    summary = _export(gen, idm, out).run()
    assert summary["episodes"]["synthetic"] == 1
    assert _written_outside(tmp_path, out, before) == [] and not Path("/tmp/abs_x").exists()
    assert (out / "videos" / safe_name(name)).is_dir()


@pytest.mark.parametrize("field, value", [("video", "../../outside.mp4"), ("video", "/etc/passwd"),
                                          ("views", {"exterior_1": "../x.mp4", "exterior_2": "a", "wrist": "b"})])
def test_trajectories_reads_only_inside_the_generation_folder(small_generations, tmp_path, field, value):
    gen, _ = small_generations
    gen = Path(shutil.copytree(gen, tmp_path / "gen"))
    (tmp_path / "outside.mp4").write_bytes(b"not yours")
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()]
    rows[0][field] = value
    if field == "video":  # one camera: the packed video itself is read
        info = json.loads((gen / "info.json").read_text())
        info["layout"] = None
        (gen / "info.json").write_text(json.dumps(info))
    (gen / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cameras = {"image": "observation.images.a"} if field == "video" else \
        {"exterior_1": "observation.images.a", "exterior_2": "observation.images.b", "wrist": "observation.images.c"}
    with pytest.raises(DatasetError, match="generations.jsonl.*(points outside|not a relative path)") as e:
        _export(gen, _idm_with_cameras(tmp_path / "idm", cameras), tmp_path / "out")
    assert "\n" not in str(e.value)


def test_two_trajectories_runs_into_one_folder_refuse_cleanly(small_generations, tmp_path):
    from worldtune.lock import OutputLock

    gen, _ = small_generations
    idm = _idm_with_cameras(tmp_path / "idm", {"exterior_1": "observation.images.a",
                                               "exterior_2": "observation.images.b", "wrist": "observation.images.c"})
    out = tmp_path / "out"
    partial = tmp_path / ".out.partial"
    export = _export(gen, idm, out)
    with OutputLock(tmp_path, "trajectories", name=".out.lock"):  # a first run, live, mid-write
        partial.mkdir()
        (partial / "half.mp4").write_bytes(b"x")
        with pytest.raises(WorldtuneError, match="in use by another worldtune run"):
            export.run()
        assert (partial / "half.mp4").is_file()  # the live run's work is untouched
    shutil.rmtree(partial)
    assert export.run()["episodes"]["synthetic"] == 1


@pytest.mark.parametrize("relative", [True, False])
def test_a_second_trajectories_run_is_refused_naming_the_output_folder(small_generations, tmp_path, monkeypatch,
                                                                      relative):
    """The lock sits beside `trajectories.out` (the folder appears only when complete); the refusal names the output
    folder itself, not the folder around it (`.` for a relative `trajectories.out = "traj"`)."""
    from worldtune.lock import OutputLock

    gen, _ = small_generations
    idm = _idm_with_cameras(tmp_path / "idm", {"exterior_1": "observation.images.a",
                                               "exterior_2": "observation.images.b", "wrist": "observation.images.c"})
    monkeypatch.chdir(tmp_path)
    out = Path("traj") if relative else tmp_path / "traj"
    export = _export(gen, idm, out)
    with OutputLock(tmp_path, "trajectories", name=".traj.lock"):  # a first run, live
        with pytest.raises(WorldtuneError) as e:
            export.run()
    assert str(e.value).startswith(f"{out} is in use by another worldtune run"), str(e.value)


# ---------------------------------------------------------------------------------------- dataset reads
def test_a_lerobot_video_path_that_leaves_the_dataset_is_a_one_line_error(small_generations, tmp_path):
    from worldtune.data.lerobot import LeRobotDataset

    _, ds = small_generations
    ds = Path(shutil.copytree(ds, tmp_path / "ds"))
    info = json.loads((ds / "meta" / "info.json").read_text())
    info["video_path"] = "../../{video_key}/file-{file_index:03d}.mp4"
    (ds / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="info.json video_path.*points outside") as e:
        LeRobotDataset(ds).episodes
    assert "\n" not in str(e.value)


def test_evaluate_reads_only_inside_the_generation_folder(small_generations, tmp_path):
    from worldtune.eval.evaluate import collect_entries

    gen, _ = small_generations
    gen = Path(shutil.copytree(gen, tmp_path / "gen"))
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()]
    rows[0]["video"] = "../../../etc/passwd"
    (gen / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match="generations.jsonl video.*points outside"):
        collect_entries([gen])
