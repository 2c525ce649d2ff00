"""`worldtune cache` split over processes: the same cache as one process, and a kill resumed by a rerun."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.faults.conftest import env
from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config
from worldtune.data.cache import INDEX, LatentCache, run as cache_run

pytestmark = pytest.mark.usefixtures("one_thread")
N_CLIPS = 12


def _overrides(model_dir: Path, dataset: Path, out: Path) -> list[str]:
    return ["--model.path", str(model_dir), "--cache.dataset", str(dataset), "--cache.out", str(out),
            "--cache.dtype", "fp32", "--cache.batch_size", "1", "--cache.text_batch_size", "2"]


def _as_process(monkeypatch, rank: int, world: int) -> None:
    for k, v in {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": rank}.items():
        monkeypatch.setenv(k, str(v))


def _tensors(root: Path) -> dict[str, torch.Tensor]:
    cache = LatentCache(root)
    out = {f"latents/{k}": cache.latents(k) for k in cache.clip_ids}
    out.update({f"text/{k}": cache._get("text", k) for k in cache.prompt_keys})
    return out


def assert_same_cache(a: Path, b: Path) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert sorted(ta) == sorted(tb)
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    # 12 clips, 6 prompts: enough that a process is still working when the test kills it
    root = write_fake_dataset(tmp_path_factory.mktemp("cache_ds") / "ds", n_train=N_CLIPS - 2, n_val=2)
    rows = pq.read_table(root / "manifest.parquet").to_pylist()
    for i, r in enumerate(rows):
        r["prompt"] = f"A robot moves square {i % 6}."
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    return root


@pytest.fixture(scope="module")
def single(dataset, tiny_model_dir, tmp_path_factory) -> Path:
    """The reference: one process."""
    out = tmp_path_factory.mktemp("single") / "cache"
    summary = cache_run(load_config(None, _overrides(tiny_model_dir, dataset, out)))
    assert summary["encoded"] == N_CLIPS and (out / INDEX).is_file()
    return out


def _popen(model_dir: Path, dataset: Path, out: Path, rank: int, world: int) -> subprocess.Popen:
    e = {**env(), "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "worldtune.cli", "cache", *_overrides(model_dir, dataset, out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)


def _shards(out: Path, rank: int) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob(f"latents-r{rank:03d}-*.safetensors")}


def test_cache_two_processes_match_one_and_resume_after_a_kill(dataset, tiny_model_dir, single, tmp_path,
                                                              monkeypatch):
    """Rank 0 of 2 runs; rank 1 (a real process) is killed with SIGKILL after its first shard; the rerun
    encodes only the missing clips, writes the one merged index, and the cache equals one process's."""
    out = tmp_path / "cache"
    cfg = load_config(None, _overrides(tiny_model_dir, dataset, out))
    _as_process(monkeypatch, 0, 2)
    assert cache_run(cfg)["encoded"] == N_CLIPS // 2
    proc = _popen(tiny_model_dir, dataset, out, 1, 2)
    t0 = time.time()
    while not _shards(out, 1) and proc.poll() is None and time.time() - t0 < 120:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = _shards(out, 1)
    assert 1 <= len(kept) < N_CLIPS // 2, "rank 1 finished before it could be killed"
    assert not (out / INDEX).exists()  # a process did not finish: no merged index

    again = [cache_run(cfg)]  # the rerun: rank 0 has nothing left, rank 1 only its missing clips
    _as_process(monkeypatch, 1, 2)
    again.append(cache_run(cfg))
    assert [s["encoded"] for s in again] == [0, N_CLIPS // 2 - len(kept)]
    after = _shards(out, 1)
    assert all(after[n] == b for n, b in kept.items())  # the killed run's shards are kept as they were
    index = json.loads((out / INDEX).read_text())
    by_rank = {r: {k for k, f in index["latents"].items() if f"-r{r:03d}-" in f} for r in (0, 1)}
    assert len(by_rank[0]) == len(by_rank[1]) == N_CLIPS // 2 and not by_rank[0] & by_rank[1]  # disjoint halves
    assert_same_cache(single, out)


def test_cache_two_processes_of_separate_views_match_one(tiny_model_dir, tmp_path, monkeypatch):
    """The separate-views cache (one latent per camera) shards the same way: ranks 0 and 1 give one process's cache."""
    from tests.train.fake_dataset import moving_square_clip
    from worldtune.data.video import write_video

    root, roles, rows = tmp_path / "ds", ["left", "wrist"], []
    for i in range(4):
        cid = f"ep{i:04d}_000"
        for j, role in enumerate(roles):
            write_video(root / "clips" / cid / f"{role}.mp4", moving_square_clip(10 * i + j, 9, 32, 48), 16)
        rows.append(dict(clip_id=cid, video=None, views=json.dumps({r: f"clips/{cid}/{r}.mp4" for r in roles}),
                         prompt=f"A robot moves square {i % 2}.", split="train"))
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    (root / "info.json").write_text(json.dumps({"format": "worldtune.dataset", "version": 1, "height": 32, "width": 48,
                                                "num_frames": 9, "layout": {"type": "separate", "roles": roles}}))
    one, two = tmp_path / "one", tmp_path / "two"
    assert cache_run(load_config(None, _overrides(tiny_model_dir, root, one)))["encoded"] == 4
    for rank in (0, 1):
        _as_process(monkeypatch, rank, 2)
        assert cache_run(load_config(None, _overrides(tiny_model_dir, root, two)))["encoded"] == 2
    assert len(LatentCache(two).clip_ids) == 8 and (two / INDEX).is_file()
    assert_same_cache(one, two)
